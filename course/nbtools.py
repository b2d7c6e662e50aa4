"""A deliberate re-export, kept so that no notebook's imports change: notebook 08 (and its student copy) does
`from course.nbtools import NOTEBOOKS`. The notebook tooling itself is course/tools/nbtools.py."""
from course.tools.nbtools import NOTEBOOKS  # noqa: F401
