"""The check machinery (course/checks/core.py) against the classes of wrong answers that once passed, each planted
as a one-line mutation of the solution (`mutant`, tests/conftest.py), and correct-but-different answers that
must pass. Runs in the simulator (CI) and on a GPU."""
import re
import traceback
from pathlib import Path

import numpy as np
import pytest
from conftest import mutant, rejects
from numba import cuda

import course
from course import data as D
from course import grad as G
from course import landscape as LS
from course import loss as L
from course.checks import CheckFailure, core, hint
from course.checks import data as c01
from course.checks import forward as c02
from course.checks import grad as c04
from course.checks import landscape as c07
from course.checks import loss as c03
from course.checks import perf as c08
from course.checks import update as c05
from course.forward import matmul_v1_kernel
from course.gather import gather_kernel
from course.scale import scale_kernel
from course.update import sgd_kernel
from course.runtime.util import cdiv

GUARD = "if i < out.size:"
FULL_BLOCKS_ONLY = "if i < out.size and (cuda.blockIdx.x < cuda.gridDim.x - 1 or cuda.threadIdx.x < out.size % cuda.blockDim.x):"


@pytest.fixture(autouse=True)
def healthy_context():
    """Every test starts and ends with the context marked usable (a test below marks it poisoned on purpose)."""
    core.POISONED = None
    yield
    core.POISONED = None


# --- sizes that are multiples of the block: a kernel that gets the last block's count from n % block -------

def test_round_sizes_catch_a_last_block_of_n_mod_block():
    # right whenever n is not a multiple of the block; with whole blocks the last one writes nothing
    rejects(c01.check_scale_kernel, mutant(scale_kernel, GUARD, FULL_BLOCKS_ONLY), "Exercise 1.2", ["never written"])
    rejects(c07.check_combine_kernel, mutant(LS.combine_kernel, GUARD, FULL_BLOCKS_ONLY), "Exercise 7.1",
            ["never written"])
    rejects(c03.check_sum_kernel, mutant(L.sum_kernel, "if i < x.size:", "if i < x.size and (cuda.blockIdx.x < "
            "cuda.gridDim.x - 1 or tid < x.size % cuda.blockDim.x):"), "Exercise 3.2", ["short by"])
    rejects(c01.check_gather_kernel, mutant(gather_kernel, "if r < out.shape[0] and c < out.shape[1]:",
            "if r < out.shape[0] and (c < out.shape[1] % cuda.blockDim.x or cuda.blockIdx.x < cuda.gridDim.x - 1):"),
            "Exercise 1.3", ["never written"])
    rejects(c05.check_sgd_kernel, mutant(sgd_kernel, "if i < p.size:", "if i < p.size and (cuda.blockIdx.x < "
            "cuda.gridDim.x - 1 or cuda.threadIdx.x < p.size % cuda.blockDim.x):"), "Exercise 5.1",
            ["did not change"])


def test_run_cases_refuses_a_check_without_both_kinds_of_size():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, 100, dtype=np.uint8)
    odd = dict(name="n=100", grid=cdiv(100, 32), block=32, inputs=[x], expected=x / np.float32(255))
    y = x[:64]
    whole = dict(name="n=64", grid=2, block=32, inputs=[y], expected=y / np.float32(255))
    for cases in ([odd], [whole]):
        with pytest.raises(ValueError, match="multiple of"):
            core.run_cases("Exercise 9.9", scale_kernel, cases, hint="h")
    assert "random cases" in core.run_cases("Exercise 9.9", scale_kernel, [odd, whole], hint="h", atol=1e-6,
                                            largest=32)


# --- inputs compared after every launch ----------------------------------------------------------------

def test_a_kernel_that_writes_into_an_input_fails():
    rejects(c07.check_combine_kernel, mutant(LS.combine_kernel, "out[i] = theta[i] + a * d1[i] + b * d2[i]",
            "d1[i] = a * d1[i]; out[i] = theta[i] + d1[i] + b * d2[i]"), "Exercise 7.1",
            ["wrote into its input d1"])
    rejects(c04.check_dlogits_kernel, mutant(G.dlogits_kernel, "dZ[r, j] = (probs[r, j] - onehot)",
            "probs[r, j] = probs[r, j] - onehot; dZ[r, j] = (probs[r, j])"), "Exercise 4.1",
            ["wrote into its input probs"])
    rejects(c05.check_sgd_kernel, mutant(sgd_kernel, "p[i] -= lr * g[i]   #", "g[i] *= lr; p[i] -= g[i]   #"),
            "Exercise 5.1", ["wrote into its input g"])
    rejects(c02.check_matmul_kernel, mutant(matmul_v1_kernel, "C[row, col] = acc", "C[row, col] = acc; "
            "A[row, 0] = acc"), "Exercise 2.1", ["wrote into its input A"])


def test_a_write_past_an_input_edge_fails():
    msg = rejects(c07.check_combine_kernel, mutant(LS.combine_kernel, "out[i] = theta[i] + a * d1[i] + b * d2[i]",
                  "out[i] = theta[i] + a * d1[i] + b * d2[i]\n        if i == out.size - 1: theta[i + 1] = a"),
                  "Exercise 7.1", ["wrote into its input theta", "out-of-bounds"])  # GPU: the padding changed
    assert "past its edges" in msg or "out-of-bounds" in msg


# --- 4.1's forgotten / B named by its factor -----------------------------------------------------------

def test_forgotten_batch_division_is_named_by_its_factor():
    msg = rejects(c04.check_dlogits_kernel, mutant(G.dlogits_kernel, " / float32(probs.shape[0])", ""),
                  "Exercise 4.1", ["times the expected"])
    assert "batch size" in msg
    msg = rejects(c04.check_dlogits_kernel, mutant(G.dlogits_kernel, "/ float32(probs.shape[0])",
                  "/ float32(probs.shape[0] * probs.shape[0])"), "Exercise 4.1", ["times the expected"])


# --- name scans follow device functions; only the generated stub is "not implemented" --------------------

@cuda.jit(device=True)
def _block_tree_then_add(s, tid, total):
    step = cuda.blockDim.x
    while step > 1:
        half = (step + 1) // 2
        if tid + half < step:
            s[tid] += s[tid + half]
        cuda.syncthreads()
        step = half
    if tid == 0:
        cuda.atomic.add(total, 0, s[0])


@cuda.jit
def sum_with_device_helper(x, total):
    s = cuda.shared.array(1024, np.float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    s[tid] = x[i] if i < x.size else np.float32(0.0)
    cuda.syncthreads()
    _block_tree_then_add(s, tid, total)


def test_reduction_in_a_device_function_passes(capsys):
    c03.check_sum_kernel(sum_with_device_helper)
    assert "✓ Exercise 3.2 passed" in capsys.readouterr().out
    assert "atomic" in core.code_names(sum_with_device_helper)


def test_own_not_implemented_error_is_not_a_stub(capsys):
    def project(S, theta_n, d1, d2):
        if np.ndim(S) != 2:
            raise NotImplementedError("only a 2-D array of snapshots is supported")
        return LS.project_to_plane(S, theta_n, d1, d2)

    c07.check_project_to_plane(project)
    assert "✓ Exercise 7.2 passed" in capsys.readouterr().out

    def stub(S, theta_n, d1, d2):
        # YOUR CODE HERE
        raise NotImplementedError("Exercise 7.2: the projection onto the plane")

    with pytest.raises(NotImplementedError, match="Exercise 7.2: the projection"):
        c07.check_project_to_plane(stub)


def test_own_not_implemented_error_on_a_supported_input_is_a_failure():
    def refuses(S, theta_n, d1, d2):
        raise NotImplementedError("not done")

    rejects(c07.check_project_to_plane, refuses, "Exercise 7.2", ["your function raised NotImplementedError"])


# --- a student's exception becomes a CheckFailure ------------------------------------------------------

def test_exceptions_of_the_students_code_become_check_failures():
    rejects(c01.check_parse_idx_header, mutant(D.parse_idx_header, "if ndim == 0:", "if ndim == 0 or ndim > 3:"),
            "Exercise 1.1", ["your function raised ValueError"])
    rejects(c07.check_filter_normalize, mutant(LS.filter_normalize, "0.0 if ignore_bias else theta[o:o + n]",
            "0.0 if ignore_bias else theta[o:o + n] + {}['missing']"), "Exercise 7.3", ["raised KeyError"])
    msg = rejects(c07.check_project_to_plane, mutant(LS.project_to_plane, "G = D.T @ D", "G = D @ D.T @ D"),
                  "Exercise 7.2", ["raised"])
    assert "with " in msg.splitlines()[0]  # the case is named


@pytest.mark.skipif(not course.SIMULATOR, reason="a raise inside a kernel reaches Python only in the simulator")
@pytest.mark.skipif(bool(course.runtime.device.simulator_only()), reason="a simulator-only numba-cuda has no compiler: no gate")
def test_a_kernel_that_no_gpu_compiles_fails_with_the_case():
    msg = rejects(c01.check_scale_kernel, mutant(scale_kernel, "out[i] = x[i] / np.float32(255.0)",
                  "out[i] = x[i] / np.float32(255.0) if i < 50 else {}['x']"), "Exercise 1.2",
                  ["no GPU can compile your kernel"])
    assert "grid=" in msg and "DictType" in msg


@pytest.mark.skipif(not course.SIMULATOR, reason="a GPU ignores a raise in a kernel (no debug build)")
def test_a_kernel_that_raises_fails_with_the_case():
    msg = rejects(c01.check_scale_kernel, mutant(scale_kernel, "out[i] = x[i] / np.float32(255.0)",
                  "out[i] = x[i] / np.float32(255.0)\n        if i == 50:\n            raise KeyError(i)"),
                  "Exercise 1.2", ["your kernel raised KeyError"])
    assert "grid=" in msg


def test_a_bug_in_the_check_itself_is_not_blamed_on_the_student(monkeypatch):
    monkeypatch.setattr(c07, "_project_ref", np.linalg.inv)  # the check calls it with 4 arguments
    with pytest.raises(TypeError):
        c07.check_project_to_plane(LS.project_to_plane)


# --- hints in two levels, tracebacks that end at the message --------------------------------------------

CODE_HINT_EXERCISES = ("1.3", "2.1", "5.1", "7.1", "10.1", "15.1")


EXERCISES = ("1.1", "1.2", "1.3", "2.1", "2.2", "2.3", "3.1", "3.2", "3.3", "4.1", "4.2", "4.3", "5.1", "5.2", "5.3",
             "6.1", "6.2", "7.1", "7.2", "7.3", "8.1", "8.2", "10.1", "10.2", "11.1", "11.2", "11.3", "11.4", "12.1", "12.2", "12.3", "13.1", "13.2", "13.3", "14.1", "14.2", "15.1")
CODE = re.compile(r"\w\[[^\]]*\] *[-+*/]?= |^\s*(for|if|while|return)\b.*:|\w = \w|\w\(\w+\[")  # code, not prose
SPELLED = re.compile(r"//| % |\b16, 8\b|16 down to")  # an answer in words: its divisions, its masks in order


def test_every_check_has_a_hint_ladder_of_nudges_then_the_answer():
    import course.checks.train, course.checks.time, course.checks.occupancy, course.checks.fused, course.checks.race, course.checks.epoch, course.checks.plan, course.checks.barriers  # noqa: F401,E401
    for number in EXERCISES:
        assert len(core.HINTS[number].splitlines()) >= 2, number   # the last level: the answer's code
        assert len(core.LADDERS[number]) == 2, number             # two nudges: every answer's code at level 3
        for nudge in core.LADDERS[number]:
            assert not CODE.search(nudge), (number, nudge)
            assert not SPELLED.search(nudge), (number, nudge)
    with pytest.raises(ValueError, match="no exercise"):
        hint("9.9")


def test_hint_climbs_the_ladder_and_shows_code_only_when_asked_by_level(capsys, monkeypatch):
    monkeypatch.setattr(core, "_hint_shown", {})
    answer = "acc += A[row, k] * B[k, col]"
    shown = []
    for _ in range(4):  # asking again and again never reaches the answer
        hint("2.1")
        shown.append(capsys.readouterr().out)
    assert "nudge 1 of 2 (then level 3: the answer's code)" in shown[0] and "nudge 2 of 2" in shown[1] and "level=3" in shown[1]
    assert not any(answer in out for out in shown)
    assert shown[0] != shown[1]
    hint("2.1", level=3)
    out = capsys.readouterr().out
    assert "this shows the answer" in out.split("\n")[0] and answer in out


def test_the_teacher_can_turn_the_answers_off(capsys, monkeypatch):
    monkeypatch.setenv(core.ANSWERS_ENV, "0")
    hint("2.1", level=3)
    out = capsys.readouterr().out
    assert "turned off" in out and "acc +=" not in out
    hint("2.1", level=1)
    assert "nudge 1 of 2" in capsys.readouterr().out


def test_the_answers_obey_their_specs():
    # 5.3's spec: float32 constants (np.float32(1.0) - beta1); 10.1: no range with a run-time step (notebook 10's
    # 64-bit division in the loop)
    assert "(np.float32(1.0) - beta1)" in core.HINTS["5.3"] and "(1 - beta1)" not in core.HINTS["5.3"]
    assert "while i < p.size" in core.HINTS["10.1"] and "range(" not in core.HINTS["10.1"]
    assert "stream](" in core.HINTS["3.3"]


@pytest.mark.parametrize("check, wrong, number", [
    (c01.check_gather_kernel, mutant(gather_kernel, "    out[r, c] = X[idx[r], c]", "    out[r, c] = X[r, c]"), "1.3"),
    (c02.check_matmul_kernel, mutant(matmul_v1_kernel, "* B[k, col]  #", "* B[k, row % B.shape[1]]  #"), "2.1"),
    (c05.check_sgd_kernel, mutant(sgd_kernel, "p[i] -= lr * g[i]   #", "p[i] += lr * g[i]   #"), "5.1"),
    (c07.check_combine_kernel, mutant(LS.combine_kernel, "a * d1[i] + b * d2[i]", "b * d1[i] + a * d2[i]"), "7.1"),
])
def test_failures_name_the_problem_without_the_solution_code(check, wrong, number):
    msg = rejects(check, wrong, f"Exercise {number}", ["expected", "never written", "did not change"])
    assert f"hint('{number}')" in msg
    for line in core.HINTS[number].splitlines():
        code = line.split("#")[0].strip()
        if len(code) > 12:
            assert code not in msg, f"the failure of {number} shows the solution's line {code!r}"


def test_hints_of_failures_hold_no_solution_code():
    """The short hints are prose: no assignment or indexing copied from a solution."""
    import re
    for mod in (c01, c02, c03, c04, c05, c07, c08):
        src = open(mod.__file__).read()
        for h in re.findall(r'hint="([^"]*)"', src) + re.findall(r'hint = \("([^"]*)"', src):
            assert not re.search(r"\w\[\w+(, \w+)*\] [-+*/]?= ", h), h


def test_traceback_ends_at_the_message_and_hides_the_reference():
    wrong = mutant(G.dlogits_kernel, " / float32(probs.shape[0])", "")
    with pytest.raises(CheckFailure) as e:
        c04.check_dlogits_kernel(wrong)
    err = e.value
    assert err.__cause__ is None and err.__suppress_context__
    shown = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    assert "np.eye" not in shown and "expected =" not in shown
    frames = traceback.extract_tb(err.__traceback__)
    assert all("course/checks/grad.py" not in f.filename for f in frames), frames  # the check's body never shows
    assert err._render_traceback_() == [f"CheckFailure: {err}"]  # what Jupyter shows: the message alone


# --- GPU faults: the case that faulted, then a clear word for every later check ---------------------------

class _FaultingKernel:
    """Launches like a kernel, and fails like a kernel that made an illegal memory access on a GPU."""
    py_func = scale_kernel.py_func

    def __getitem__(self, config):
        def run(*args):
            from numba.cuda.cudadrv.driver import CudaAPIError
            raise CudaAPIError(700, "Call to cuCtxSynchronize results in CUDA_ERROR_ILLEGAL_ADDRESS")
        return run


def test_gpu_fault_names_the_case_then_later_checks_say_restart_first(capsys):
    pytest.importorskip("numba.cuda.cudadrv.driver")
    msg = rejects(c01.check_scale_kernel, _FaultingKernel(), "Exercise 1.2", ["CUDA_ERROR_ILLEGAL_ADDRESS"])
    assert "grid=" in msg and "Kernel > Restart" in msg and "unusable" in msg
    assert core.POISONED
    with pytest.raises(CheckFailure) as e:  # a correct answer, in the same process
        c02.check_matmul_kernel(matmul_v1_kernel)
    msg = str(e.value)
    assert msg.startswith("Exercise 2.1 cannot run: an earlier kernel crashed the GPU")
    assert "Exercise 1.2" in msg and "Kernel > Restart" in msg


def test_sticky_errors_are_recognised_by_code_and_by_name():
    class E(Exception):
        def __init__(self, code):
            self.code = code
    assert core._sticky(E(700)) and core._sticky(E(716)) and core._sticky(E(719))
    assert not core._sticky(E(2))  # out of memory: the context survives
    assert core._sticky(RuntimeError("Call to cuMemAlloc results in CUDA_ERROR_ILLEGAL_ADDRESS"))
    assert not core._sticky(ValueError("shapes do not match"))


# --- the one place where a check passes -----------------------------------------------------------------

def test_a_pass_goes_through_passed_once(monkeypatch):
    seen = []
    monkeypatch.setattr(core, "passed", lambda ex, fn, what, check=None: seen.append((ex, fn, what)))
    c01.check_scale_kernel(scale_kernel)
    assert seen == [("Exercise 1.2", scale_kernel, seen[0][2])] and "random cases" in seen[0][2]


def test_gpu_fault_inside_a_students_function_poisons_too():
    pytest.importorskip("numba.cuda.cudadrv.driver")
    from numba.cuda.cudadrv.driver import CudaAPIError

    def mean_that_faults(x, out=None):
        raise CudaAPIError(700, "Call to cuMemcpyDtoH results in CUDA_ERROR_ILLEGAL_ADDRESS")

    msg = rejects(c03.check_batch_mean, mean_that_faults, "Exercise 3.3", ["CUDA_ERROR_ILLEGAL_ADDRESS"])
    assert "Kernel > Restart" in msg and core.POISONED
    msg = rejects(c07.check_project_to_plane, LS.project_to_plane, "Exercise 7.2", ["cannot run"])
    assert "Exercise 3.3" in msg


def test_a_raise_names_the_line_of_the_students_code():
    msg = rejects(c01.check_parse_idx_header, mutant(D.parse_idx_header, "if ndim == 0:", "if ndim == 0 or ndim > 3:"),
                  "Exercise 1.1", ["your function raised ValueError"])
    assert "of parse_idx_header: `raise ValueError(\"zero dimensions\")`" in msg, msg


def test_a_course_function_that_the_check_misuses_is_not_blamed_on_the_student(monkeypatch):
    from course.runtime.util import require
    monkeypatch.setattr(c07, "_project_ref", require)  # called as require(S, theta_n, d1, d2): host arrays
    with pytest.raises(ValueError, match="must be a device array"):  # raised in course/runtime/util.py, via the check
        c07.check_project_to_plane(LS.project_to_plane)


def test_a_build_without_hint_answers_holds_no_answer(tmp_path):
    import shutil

    from course.tools.teach import without_hint_answers
    for f in Path(core._CHECKS_DIR).glob("*.py"):
        shutil.copy(f, tmp_path / f.name)
    import course.checks.train, course.checks.epoch  # noqa: F401,E401  (every exercise registered)
    assert without_hint_answers(tmp_path) == len(EXERCISES)
    text = "\n".join(p.read_text() for p in tmp_path.glob("*.py"))
    for number in EXERCISES:  # (a docstring may still state the spec's formula)
        assert core.HINTS[number] not in text, number
    assert (tmp_path / Path(core.NO_ANSWERS_FILE).name).exists()
    compile(text, "checks", "exec")  # still Python


def test_a_shape_of_one_dimension_is_written_as_a_tuple():
    from course.runtime.util import require
    with pytest.raises(ValueError, match=r"loss must have shape \(1,\), got \(2,\)"):
        require("loss", cuda.device_array(2, np.float32), np.float32, shape=(1,))


def test_the_simulator_prints_no_runtime_warning_above_a_failure(recwarn):
    # a 0 / 0 in a simulated thread: NumPy warns there; a GPU would not, and the check names the NaN
    wrong = mutant(scale_kernel, "out[i] = x[i] / np.float32(255.0)",
                   "out[i] = np.float32(x[i] - x[i]) / np.float32(x[i] - x[i])")
    rejects(c01.check_scale_kernel, wrong, "Exercise 1.2", ["NaN"])
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_a_check_without_the_largest_block_is_refused():
    x = np.ones(5, np.uint8)
    cases = [dict(name="odd", grid=1, block=8, inputs=[x], expected=np.ones(5, np.float32)),
             dict(name="round", grid=1, block=8, inputs=[x[:8]], expected=np.ones(8, np.float32))]
    if not course.SIMULATOR:  # MAX_THREADS by default: on a GPU (in the simulator such a block costs ~1 s)
        with pytest.raises(ValueError, match="a block of 1024 threads"):
            core.run_cases("Exercise 1.2", scale_kernel, cases, hint="h")
    with pytest.raises(ValueError, match="a block of 64 threads"):
        core.run_cases("Exercise 1.2", scale_kernel, cases, hint="h", largest=64)


@pytest.mark.parametrize("given, says", [(5, "got int 5"), (lambda x: x, "a function <lambda> without @cuda.jit")])
def test_a_check_given_something_that_is_not_a_kernel_says_so(given, says):
    """A regression: a check given a non-kernel said "'int' object is not subscriptable"."""
    with pytest.raises(CheckFailure) as e:
        c01.check_scale_kernel(given)
    msg = str(e.value)
    assert "expected a @cuda.jit kernel" in msg and says in msg and "subscriptable" not in msg, msg
