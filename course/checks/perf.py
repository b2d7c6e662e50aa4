"""Checks for notebook 08's exercises (performance), and the signatures of its kernels and course.fused's."""
import numpy as np

import course
from course.checks.core import fail, raise_if_unimplemented, run_cases
from course.util import cdiv

_M2 = "float32[:, ::1]"
_V = "float32[::1]"
_I = "int64[::1]"
_ROWS = f"{_M2}, {{y}}, {_I}, int64, {_M2}, {_V}, {_M2}, {_V}, {_M2}, {_M2}, {_M2}, {_V}"
_UPD = f"{_M2}, {_I}, int64, float32, {_M2}, {_V}, {_M2}, {_V}, {_M2}, {_M2}, {_M2}"
_STEPS = f"{_M2}, {{y}}, {_I}, int64, int64, float32, {_M2}, {_V}, {_M2}, {_V}, {_M2}, {_M2}, {_M2}, {_V}"
SIGNATURES = {  # for tests/test_compile.py: every kernel of notebook 08, as launchers and checks call it
    "course.fused:fused_rows_kernel": [_ROWS.format(y=_I), _ROWS.format(y="int32[::1]")],
    "course.fused:fused_update_kernel": [_UPD],
    "course.fused:fused_steps_kernel": [_STEPS.format(y=_I), _STEPS.format(y="int32[::1]")],
}
