"""The compile gate (course/checks/core.py `compile_gate`, course/runtime/gate.py): every kernel check compiles the
student's kernel for a real GPU first, in the simulator too (a GPU-mode worker process: numba-cuda compiles without
a driver), and refuses what no GPU compiles and float64 arithmetic in a kernel whose arrays are float32. Planted
as one-line mutations of the solutions (tests/conftest.py `mutant`); correct answers written another way pass."""
import re

import pytest
from conftest import mutant, mutated, rejects

from course.runtime import device
from course.checks import core
from course.checks import data as c01
from course.checks import forward as c02
from course.checks import grad as c04
from course.checks import loss as c03
from course.checks import update as c05
from course.forward import matmul_v1_kernel
from course.grad import dlogits_kernel
from course.loss import softmax_xent_kernel
from course.scale import scale_kernel
from course.update import adam_kernel

pytestmark = pytest.mark.skipif(bool(device.simulator_only()), reason=f"{device.simulator_only()}: no compiler")

FLOAT64 = ["computes in float64"]
NO_GPU = ["no GPU can compile your kernel"]


def bug(id, *edits):
    return pytest.param(edits, id=id)


# --- float64 arithmetic in a float32 kernel: the line that computes it is named ----------------------------

@pytest.mark.parametrize("check, solution, exercise, edits, line", [
    (c02.check_matmul_kernel, matmul_v1_kernel, "2.1", [("acc = float32(0.0)", "acc = 0.0")], "acc = 0.0"),
    (c02.check_matmul_kernel, matmul_v1_kernel, "2.1", [("acc = float32(0.0)", "acc = 0")], "acc = 0"),
    (c01.check_scale_kernel, scale_kernel, "1.2", [("x[i] / np.float32(255.0)", "x[i] / 255")], "out[i] = x[i] / 255"),
    (c04.check_dlogits_kernel, dlogits_kernel, "4.1", [("/ float32(probs.shape[0])", "/ probs.shape[0]")],
     "dZ[r, j] = (probs[r, j] - onehot) / probs.shape[0]"),
    (c05.check_adam_kernel, adam_kernel, "5.3", [("(np.float32(1.0) - beta1)", "(1 - beta1)")],
     "mi = beta1 * m[i] + (1 - beta1) * gi"),
    (c03.check_softmax_xent_kernel, softmax_xent_kernel, "3.1", [("s = np.float32(0.0)", "s = 0.0")], "s = 0.0"),
], ids=["2.1 acc = 0.0", "2.1 acc = 0", "1.2 x / 255", "4.1 / an int", "5.3 1 - beta1", "3.1 s = 0.0"])
def test_float64_is_refused_with_its_line(check, solution, exercise, edits, line):
    """The line named is where the float64 comes from: an accumulator's bare start (`acc = 0.0`), not its `+=`."""
    msg = rejects(check, mutated(solution, *edits), f"Exercise {exercise}", FLOAT64)
    assert f"`{line}`" in msg, msg
    assert ("starting at" in msg) == line.endswith(("= 0.0", "= 0")), msg  # then the arithmetic's lines follow
    hint = msg.split("Hint:")[1].split("More help:")[0]
    assert "np.float32(...)" in hint, msg  # the hint says what to write instead, without an answer's expression
    assert not re.search(r"np\.float32\([^.)]", hint), msg


# --- Python that the simulator runs and no GPU compiles: numba's reason, in one line -------------------------

MATMUL_GUARD = "if row < C.shape[0] and col < C.shape[1]:"
ACC_LOOP = ("acc = float32(0.0)\n        for k in range(A.shape[1]):\n            acc += A[row, k] * B[k, col]"
            "  # A[row, k]: one address for the warp; B[k, col]: 32 neighbours\n        C[row, col] = acc")


@pytest.mark.parametrize("edits", [
    bug("generator expression", (ACC_LOOP, "C[row, col] = sum(A[row, k] * B[k, col] for k in range(A.shape[1]))")),
    bug("np.dot on rows", (ACC_LOOP, "C[row, col] = np.dot(A[row, :], B[:, col])")),
    bug("try/except as the guard", (f"{MATMUL_GUARD}\n        {ACC_LOOP}",
                                    f"try:\n        {ACC_LOOP}\n    except IndexError:\n        pass")),
    bug("a list", (ACC_LOOP, "C[row, col] = [A[row, k] for k in range(3)][0]")),
])
def test_what_no_gpu_compiles_is_refused(edits):
    kernel = mutated(matmul_v1_kernel, *edits)
    kernel.py_func.__globals__.setdefault("np", __import__("numpy"))
    msg = rejects(c02.check_matmul_kernel, kernel, "Exercise 2.1", NO_GPU)
    assert 'numba says "' in msg and "\n" not in msg.split('numba says "')[1].split('"')[0], msg  # one line
    assert "(line " in msg, msg


# --- correct answers written another way pass the gate ----------------------------------------------------

@pytest.mark.parametrize("check, solution, edits", [
    (c02.check_matmul_kernel, matmul_v1_kernel, [("acc = float32(0.0)", "acc = A[row, 0] * float32(0.0)")]),
    (c02.check_matmul_kernel, matmul_v1_kernel, [("for k in range(A.shape[1]):",
                                                   "for k in range(A.shape[1] - 1, -1, -1):")]),
    (c04.check_dlogits_kernel, dlogits_kernel, [("float32(1.0) if j == y[r] else float32(0.0)",
                                                 "np.float32(j == y[r])")]),
    (c01.check_scale_kernel, scale_kernel, [("x[i] / np.float32(255.0)", "x[i] * np.float32(1 / 255)")]),
], ids=["2.1 acc from a product", "2.1 k backwards", "4.1 a cast of a bool", "1.2 times a float32 1/255"])
def test_correct_answers_written_otherwise_pass(check, solution, edits):
    kernel = mutated(solution, *edits)
    kernel.py_func.__globals__.setdefault("np", __import__("numpy"))
    check(kernel)


def test_the_gate_compiles_once_per_kernel_and_types():
    core._gate_answers.clear()
    c02.check_matmul_kernel(matmul_v1_kernel)
    c02.check_matmul_kernel(matmul_v1_kernel)
    assert len(core._gate_answers) == 1  # every case has the same argument types; the second check is cached


def test_the_gate_names_a_line_in_a_device_function():
    from course import forward as F
    bad_dot = mutant(F.tile_dot, "acc = float32(0.0)", "acc = 0.0")
    kernel = mutant(F.matmul_v2_kernel, "tile_dot(", "bad_tile_dot(", scope={"bad_tile_dot": bad_dot})
    msg = rejects(c02.check_tiled_matmul, kernel, "Exercise 2.2", FLOAT64)
    assert "of tile_dot" in msg, msg
