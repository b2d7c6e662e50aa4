"""course.runtime.registry: the course's call sites ask it for the student's solutions; nothing else is swapped."""
import importlib.util

import numpy as np
import pytest
from numba import cuda

import course.scale as scale
import course.train
from course.runtime import mine, registry
from course.runtime.util import cdiv
from course.checks.data import check_scale_kernel
from simulated_student import run_cell
from test_mine import SCALE_CELL

MODULE = '''from numba import cuda


@cuda.jit(device=True)
def piece(x):
    return x + 1


@cuda.jit(device=True)
def middle(x):
    return piece(x) * 2


@cuda.jit
def kernel(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = middle(i)
'''
STUDENT_PIECE = '''from numba import cuda


@cuda.jit(device=True)
def piece(x):
    return x + 10
'''


@pytest.fixture(autouse=True)
def empty_registry():
    """Each test starts and ends with the course's own everywhere."""
    registry.clear()
    yield
    registry.clear()


def load(path, text, name):
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pixels():
    return cuda.to_device(np.random.default_rng(0).integers(0, 256, 300, dtype=np.uint8))


def test_a_launcher_runs_the_registered_kernel_and_the_course_s_otherwise():
    """scale() launches what registry.pick gives for 1.2: a registered kernel, else the course's scale_kernel."""
    launched = []

    class Spy:
        """A student's kernel that notes its launches (and runs the course's)."""

        def __getitem__(self, config):
            launched.append(config)
            return scale.scale_kernel[config]

    x = pixels()
    registry.register("1.2", Spy())
    assert np.allclose(scale.scale(x).copy_to_host(), scale.scale_ref(x.copy_to_host()))
    assert launched == [(cdiv(300, scale.THREADS), scale.THREADS)]
    registry.clear()
    assert np.allclose(scale.scale(x).copy_to_host(), scale.scale_ref(x.copy_to_host()))
    assert len(launched) == 1                                  # the course's ran: the spy saw nothing more


def test_use_mine_registers_and_changes_no_module_attribute(tmp_path, monkeypatch):
    """use_mine() puts the student's passing kernel in the registry only: the course's module attributes, and a
    reference to the course's kernel set by hand anywhere in the package, stay the course's (the attribute walk that
    replaced them is gone); use_course() empties the registry."""
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    ns = {"__name__": "__main__"}
    run_cell(ns, SCALE_CELL, "<01 cell>")
    check_scale_kernel(ns["scale_kernel"])                     # passes: saved as the student's 1.2
    original = scale.scale_kernel
    monkeypatch.setattr(course.train, "kernel_by_hand", original, raising=False)
    monkeypatch.setattr(course.train, "table_by_hand", {"scale": original}, raising=False)
    st = mine.use_mine(["1.2"], quiet=True)
    theirs = st["1.2"][0]
    assert theirs is not None and registry.pick("1.2", original) is theirs and mine.installed() == {"1.2": theirs}
    assert theirs.py_func.__code__.co_filename == str(tmp_path / "mine" / "ex_1_2.py")
    assert scale.scale_kernel is original and course.train.kernel_by_hand is original
    assert course.train.table_by_hand["scale"] is original
    x = pixels()
    assert np.allclose(scale.scale(x).copy_to_host(), scale.scale_ref(x.copy_to_host()))  # theirs, through pick
    mine.use_course()
    assert registry.registered() == {} and registry.pick("1.2", original) is original


def test_with_pieces_compiles_a_copy_that_calls_the_registered_device_function(tmp_path):
    """A kernel whose device function (two calls down) is an exercise: with_pieces gives a copy calling the
    registered one, made once per choice; the module's own kernel and device function are untouched, and without
    a registration the kernel itself comes back. A student build's guard around a kernel stays a guard."""
    mod = load(tmp_path / "lesson_like.py", MODULE, "lesson_like")
    theirs = load(tmp_path / "ex_99_1.py", STUDENT_PIECE, "ex_99_1").piece
    pieces = {"piece": "99.1"}
    out = cuda.device_array(40, np.int64)
    assert registry.with_pieces(mod.kernel, pieces) is mod.kernel
    registry.register("99.1", theirs)
    copy = registry.with_pieces(mod.kernel, pieces)
    assert copy is not mod.kernel and registry.with_pieces(mod.kernel, pieces) is copy
    copy[1, 64](out)
    assert out.copy_to_host().tolist() == [(i + 10) * 2 for i in range(40)]
    mod.kernel[1, 64](out)                                     # the module's own: the course's piece
    assert out.copy_to_host().tolist() == [(i + 1) * 2 for i in range(40)]
    assert mod.piece.py_func.__globals__ is vars(mod) and vars(mod)["piece"] is not theirs

    class Guard:
        """As the student build's Unsolved: a wrapper whose .kernel is the kernel."""

        def __init__(self, kernel):
            self.kernel, self.py_func = kernel, kernel.py_func

    built = load(tmp_path / "built_like.py", MODULE, "built_like")   # a student build's module: guarded at import
    built.kernel = Guard(built.kernel)
    guarded = registry.with_pieces(built.kernel, pieces)
    assert type(guarded) is Guard and guarded.kernel is not built.kernel.kernel
    guarded.kernel[1, 64](out)
    assert out.copy_to_host().tolist() == [(i + 10) * 2 for i in range(40)]


def test_a_trainer_runs_the_pieces_registered_at_each_launch():
    """FusedTrainer asks with_yours at every launch, not once when built: a later use_mine() counts, clear() too."""
    import course.fused as fused
    from course.train import init_params
    trainer = fused.FusedTrainer(init_params(8, 0, n_in=20), 4, 0.1)    # built before anything is registered
    assert trainer.typed[fused.fused_steps_kernel].kernel is fused.fused_steps_kernel
    registry.register("11.1", fused.tile_origin)
    try:
        copy = trainer.typed[fused.fused_steps_kernel].kernel
        assert copy is fused.with_yours(fused.fused_steps_kernel) and copy is not fused.fused_steps_kernel
        assert trainer.typed[fused.fused_steps_kernel] is trainer.typed[fused.fused_steps_kernel]   # typed once
    finally:
        registry.clear()
    assert trainer.typed[fused.fused_steps_kernel].kernel is fused.fused_steps_kernel
