"""Exercise checks: `core` is the machinery, one module per notebook holds that notebook's checks."""
from course.checks.core import CheckFailure, run_cases  # noqa: F401
