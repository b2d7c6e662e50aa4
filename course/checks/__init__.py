"""Exercise checks: `core` is the machinery, one module per notebook holds that notebook's checks.
`hint("2.1")` prints an exercise's code-level hint."""
from course.checks.core import CheckFailure, hint, run_cases  # noqa: F401
