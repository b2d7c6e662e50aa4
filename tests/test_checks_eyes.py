"""The simulator's eyes on a GPU (course/checks/core.py `simulator_eyes`): a kernel check runs its smallest odd case
through numba-cuda's simulator on a GPU machine too, so that memory-safety bugs that change no value there (a read
past an input's end, a local array written past its end, a shared cell read before any thread wrote it) and races
the GPU's warps happen to hide (a missing cuda.syncthreads()) fail on either machine. Each planted bug below is
caught by the simulator itself in CI and by the simulator's run inside the check on a GPU."""
import numpy as np
import pytest
from conftest import mutant, mutated, rejects

from course import loss as L
from course.checks import core
from course.checks import data as c01
from course.checks import forward as c02
from course.checks import loss as c03
from course.checks import perf as c15
from course.forward import matmul_v2_kernel, tile_dot
from course.matmul import matmul_v3_kernel
from course.scale import scale_kernel
from numba import cuda

SAYS = ["out-of-bounds", "NaN", "expected", "should be"]  # what the simulator shows: the access, or the value


def test_the_smallest_odd_case_runs_in_the_simulator(monkeypatch):
    monkeypatch.setenv(core.SIM_ENV, "always")  # in CI too, where the checks already run in the simulator
    ran = []
    cases = [dict(grid=4, block=32, n=128), dict(grid=3, block=32, n=70), dict(grid=1, block=8, n=5),
             dict(grid=1, block=8, n=8)]
    core.simulator_eyes(cases, lambda c, on: ran.append((c["n"], on.where)), lambda c: c["n"] % c["block"] != 0)
    assert [n for n, _ in ran] == [5] and "numba's simulator" in ran[0][1]


def test_the_simulator_eyes_can_be_turned_off(monkeypatch):
    monkeypatch.setenv(core.SIM_ENV, "0")
    ran = []
    core.simulator_eyes([dict(grid=1, block=8, n=5)], lambda c, on: ran.append(c), lambda c: True)
    assert ran == []


def test_a_solution_passes_the_simulators_run(monkeypatch):
    monkeypatch.setenv(core.SIM_ENV, "always")
    c01.check_scale_kernel(scale_kernel)
    c03.check_sum_kernel(L.sum_kernel)


# --- memory-safety bugs: on a GPU the guard cells hide them (a read past the end returns a value nobody uses) --

def test_an_input_read_before_the_bounds_guard_fails():
    wrong = mutated(scale_kernel, ("i = cuda.grid(1)", "i = cuda.grid(1)\n    v = x[i]"),
                    ("out[i] = x[i] / np.float32(255.0)", "out[i] = v / np.float32(255.0)"))
    rejects(c01.check_scale_kernel, wrong, "Exercise 1.2", ["out-of-bounds"])


SUM_EXPS = ("        for c in range(C):\n            s += math.exp(logits[r, c] - m)\n"
            "        for c in range(C):\n            probs[r, c] = math.exp(logits[r, c] - m) / s")
LOCAL_10 = ("        e = cuda.local.array(10, np.float32)\n        for c in range(C):\n"
            "            e[c] = math.exp(logits[r, c] - m)\n            s += e[c]\n"
            "        for c in range(C):\n            probs[r, c] = e[c] / s")


def test_a_local_array_written_past_its_end_fails():
    # right for C <= 10 (MNIST); the check has rows of C = 13, so the local array of 10 overflows
    # (on a GPU the writes past its end land in the thread's other local memory: the values may or may not show)
    rejects(c03.check_softmax_xent_kernel, mutated(L.softmax_xent_kernel, (SUM_EXPS, LOCAL_10)), "Exercise 3.1",
            SAYS)


def test_a_tree_that_reads_cells_no_thread_wrote_fails():
    # the threads past the end of x store nothing: their cells hold whatever shared memory held
    rejects(c03.check_sum_kernel, mutated(L.sum_kernel, ("s[tid] = np.float32(0.0)", "pass")), "Exercise 3.2",
            ["NaN", "should be"])


def test_a_correct_local_array_of_the_right_size_passes():
    # a different but correct answer: the exps kept in a local array as large as the widest row the check uses
    c03.check_softmax_xent_kernel(mutated(L.softmax_xent_kernel, (SUM_EXPS, LOCAL_10.replace("(10,", "(16,"))))


# --- races that a GPU's warps happened to hide: the given second barrier of a tiled loop deleted -------------

def test_the_tiled_matmuls_second_barrier_deleted_fails():
    bad_dot = mutated(tile_dot, ("cuda.syncthreads()  # 2", "pass  # 2"))
    wrong = mutant(matmul_v2_kernel, "tile_dot(", "bad_tile_dot(", scope={"bad_tile_dot": bad_dot})
    rejects(c02.check_tiled_matmul, wrong, "Exercise 2.2", SAYS)


def test_the_register_tiled_matmuls_second_barrier_deleted_fails():
    wrong = mutated(matmul_v3_kernel, ("cuda.syncthreads()                      # everyone is done",
                                       "pass  # everyone is done"))
    rejects(c15.check_matmul_v3, wrong, "Exercise 15.1", SAYS)


# --- what the simulator cannot run: warp shuffles; kernels made by a function (closures) --------------------

def test_a_device_function_with_a_warp_shuffle_is_not_simulated():
    from course.runtime import device

    @cuda.jit(device=True)
    def lane_swap(v):
        return cuda.shfl_xor_sync(0xFFFFFFFF, v, 1)

    with pytest.raises(device.NotSimulable, match="shfl_xor_sync"):
        device.simulated(lane_swap)


def _apply_kernel(fn):
    """A kernel made by a function, as 11.1's check wraps the student's device function: x[i] = fn(x[i])."""
    @cuda.jit
    def kernel(x):
        i = cuda.grid(1)
        if i < x.shape[0]:
            x[i] = fn(x[i])
    return kernel


def test_a_kernel_closing_over_a_device_function_is_simulated_with_it():
    """The simulated kernel calls a simulated copy of the device function it closes over, in a new cell (the
    original kernel keeps its own)."""
    from course.runtime import device

    @cuda.jit(device=True)
    def twice(v):
        return v * np.float32(2)

    kernel = _apply_kernel(twice)
    sim = device.simulated(kernel)
    assert kernel.py_func.__closure__[0].cell_contents is twice
    x = device.simulator_to_device(np.arange(5, dtype=np.float32))
    sim[1, 8](x)
    assert np.array_equal(x.copy_to_host(), 2 * np.arange(5, dtype=np.float32))
