"""Exercise checks: `core` is the machinery, one module per notebook holds that notebook's checks.
`hint("2.1")` prints an exercise's code-level hint."""
from course.checks.core import CheckFailure, hint, run_cases  # noqa: F401
from course.runtime import mine  # noqa: E402,F401  (it listens to the checks' passes: core.on_pass)
