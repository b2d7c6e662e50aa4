"""The lessons' intrinsics are written once, for the GPU; course.runtime.intrinsics picks the simulator's stand-ins
in one place, and course.fused holds no simulator branch; its kernels and device functions take about 10
arguments, the state as namedtuples, typed once per set of arrays (course.runtime.util.Specialized)."""
import ast
from pathlib import Path

import numpy as np
import pytest
from numba import cuda, float32, int64, typeof

import course
from course.runtime import intrinsics
from course.runtime.util import Specialized

FUSED = Path(__file__).resolve().parent.parent / "course" / "fused.py"
MAX_ARGS = 10  # "about 10 arguments" a function (issue 49, item 3)


def _tree():
    return ast.parse(FUSED.read_text(encoding="utf-8"))


def _jitted(fn):
    """True for a def decorated with cuda.jit (a kernel or a device function) or intrinsic."""
    return any("jit" in ast.unparse(d) or ast.unparse(d) == "intrinsic" for d in fn.decorator_list)


def test_course_fused_has_no_simulator_branch_in_its_module_or_device_code():
    tree = _tree()
    ifs = [ast.unparse(n.test) for n in tree.body if isinstance(n, ast.If)]
    assert ifs == [], f"module-level branches: {ifs}"
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and _jitted(n)):
        names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | \
                {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
        assert not {"SIMULATOR", "_SIM"} & names, fn.name


def test_no_kernel_or_device_function_of_course_fused_takes_more_than_about_10_arguments():
    counts = {n.name: len(n.args.args) for n in _tree().body if isinstance(n, ast.FunctionDef) and _jitted(n)}
    assert {name: k for name, k in counts.items() if k > MAX_ARGS} == {}
    assert counts["fused_steps_kernel"] == 6 and counts["phase_c"] == 10 and counts["chunk_grads"] == 10


def test_phase_c_starts_the_tma_before_the_shuffles_that_add_the_blocks():
    """The device function of course.fused that computes the blocks and starts the TMA calls block_grads, then
    copy_x, then sum_cells: the copy of the next batch's tile lands while the lanes add up (sum_cells before
    copy_x made the next phase A wait longer for it)."""
    def calls(fn):
        return {n.func.id: n.lineno for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    found = [(fn.name, calls(fn)) for fn in _tree().body if isinstance(fn, ast.FunctionDef)
             and {"block_grads", "copy_x"} <= set(calls(fn))]
    assert len(found) == 1, [name for name, _ in found]
    name, at = found[0]
    assert at["block_grads"] < at["copy_x"] < at.get("sum_cells", 0), (name, at)


def test_in_the_simulator_the_intrinsics_are_the_stand_ins():
    import course.fused as fused
    if not course.SIMULATOR:
        pytest.skip("on a GPU the intrinsics are numba's")
    for name, stand_in in intrinsics.STAND_INS.items():
        assert getattr(fused, name) is stand_in, name
    assert fused.has_tma() is False


def test_an_intrinsic_without_a_stand_in_is_refused_in_one_line():
    if not course.SIMULATOR:
        pytest.skip("on a GPU every intrinsic is numba's")
    with pytest.raises(NotImplementedError, match=r"^intrinsic clock has no stand-in .*intrinsics\.py$"):
        @intrinsics.intrinsic
        def clock(typingctx):
            """A PTX instruction nobody wrote a stand-in for."""


def test_the_stand_ins_do_what_their_instructions_do_or_refuse_the_tma():
    a = np.arange(8, dtype=np.float32)
    assert intrinsics.load4(a, 4) == (4.0, 5.0, 6.0, 7.0)
    assert intrinsics.prefetch_l2(a.reshape(2, 4), 1, 3) is None
    for name in ("copy_init", "copy_expect", "copy_tile", "copy_fence", "copy_fence_global", "copy_done"):
        with pytest.raises(NotImplementedError, match="compute capability 9.0"):
            intrinsics.STAND_INS[name]()


class _Kernel:
    """A stand-in for a numba-cuda dispatcher: counts specialize() calls, records launches."""

    def __init__(self):
        self.typings, self.launches = 0, []

    def specialize(self, *args):
        self.typings += 1
        return self

    def __getitem__(self, config):
        return lambda *args: self.launches.append((config, args))


def test_a_specialized_kernel_is_typed_once_per_set_of_arrays_and_number_types():
    k = _Kernel()
    s = Specialized(k)
    X, y = np.zeros((3, 2), np.float32), np.zeros(3, np.int64)
    for step in range(3):                                   # same arrays, a new int each launch: typed once
        s[2, 64, 0]((X, y), step, np.float32(0.1))
    assert k.typings == 1 and [c for c, _ in k.launches] == [(2, 64, 0)] * 3
    s[1, 32]((X, y), 7, np.float32(0.1))
    assert k.typings == 1
    s[1, 32]((X, y.copy()), 7, np.float32(0.1))             # another array, in a tuple: typed again
    assert k.typings == 2
    s[1, 32]((X, y), 7.0, np.float32(0.1))                  # a float where an int was: typed again
    assert k.typings == 3
    assert k.launches[-1] == ((1, 32), ((X, y), 7.0, np.float32(0.1)))


def test_the_signature_tables_namedtuples_are_the_types_numba_gives_the_launch_arguments():
    from numba import boolean
    from course.fused import Acts, Batch, Momentum, Steps
    from course.tools.signatures import namespace
    names = namespace()
    X, y, perm = np.zeros((4, 3), np.float32), np.zeros(4, np.int32), np.zeros(4, np.int64)
    assert typeof(Batch(X, y, perm)) == names["Batch"](float32[:, ::1], typeof(y), int64[::1])
    Z = np.zeros((2, 3), np.float32)
    assert typeof(Acts(Z, Z, Z, Z)) == names["Acts"](*[float32[:, ::1]] * 4)
    T = np.zeros((0, 1, 16), np.uint64)
    V1, v1 = np.zeros((0, 0), np.float32), np.zeros(0, np.float32)       # plain SGD: velocities without cells
    m = Momentum(np.float32(0.0), False, V1, v1, V1, v1)
    M = names["Momentum"](float32, boolean, float32[:, ::1], float32[::1], float32[:, ::1], float32[::1])
    assert typeof(m) == M
    assert typeof(Steps(0, 1, np.float32(0.1), m, np.zeros(2, np.float32), T)) == \
        names["Steps"](int64, int64, float32, M, float32[::1], typeof(T))


def test_the_simulator_takes_max_registers_and_aligns_shared_arrays():
    if not course.SIMULATOR:
        pytest.skip("the simulator's patch")
    from course.runtime.cpu import simulating

    @cuda.jit(max_registers=32)
    def where(out):
        a = cuda.shared.array(5, float32, alignment=64)
        b = cuda.shared.array(3, float32)
        a[0] = float32(1.0)
        b[0] = a[0]
        out[0] = a.ctypes.data % 64 if cuda.threadIdx.x == 0 else out[0]
        out[1] = b[0]

    out = cuda.to_device(np.full(2, -1, np.int64))
    with simulating():
        where[1, 4](out)
    assert out.copy_to_host().tolist() == [0, 1]


def test_chunk_grads_stages_x_with_a_few_loads_in_flight_at_a_constant_count():
    """stage_x_lean (chunk_grads's staging of X, batches of more than CHUNK rows) loads LEAN_LOADS cells per thread
    in loops of that constant length (unrolled: the loads go out together), 2 to 4 of them (16 spilled there)."""
    import course.fused as fused
    fn = next(n for n in _tree().body if isinstance(n, ast.FunctionDef) and n.name == "stage_x_lean")
    loops = [ast.unparse(n.iter) for n in ast.walk(fn) if isinstance(n, ast.For)]
    assert loops and set(loops) == {"range(LEAN_LOADS)"}, loops
    assert 2 <= fused.LEAN_LOADS <= 4
