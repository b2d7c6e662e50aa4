"""The compile test's data (tests/test_compile.py, `python -m course.tools.compile`): every course kernel, one table
per topic, "module:kernel" -> the argument types it is compiled for, as numba spells them ("C" layout `[::1]` as
launchers pass them, "A" layout `[:]` as the checks' guarded views do). A new kernel goes in its topic's table."""

_M2, _A2 = "float32[:, ::1]", "float32[:, :]"  # 2-D float32: "C" layout, "A" layout
_C1, _A1 = "float32[::1]", "float32[:]"        # 1-D float32: "C" layout, "A" layout
_V, _I = "float32[::1]", "int64[::1]"


def _sig(arrays, scalars, layout):
    """A kernel signature: `arrays` flat float32 arrays in `layout`, then `scalars` float32 scalars."""
    return ", ".join([f"float32[{layout}]"] * arrays + ["float32"] * scalars)


SUPPORT = {"course.runtime.timing:hold_kernel": ["int64, float32[::1]"]}  # support kernels, taught in no notebook

DATA = {  # every kernel of notebook 01, as launchers and checks call it
    "course.scale:scale_kernel": ["uint8[::1], float32[::1]", "uint8[:], float32[:]"],
    "course.gather:gather_kernel": ["float32[:, ::1], int64[::1], float32[:, ::1]",
                                    "float32[:, ::1], int32[::1], float32[:, ::1]",
                                    "float32[:, :], int64[:], float32[:, :]"],
    "course.gather:gather1d_kernel": ["int64[::1], int64[::1], int64[::1]", "int32[::1], int32[::1], int32[::1]",
                                      "int64[::1], int32[::1], int64[::1]"],
}

FORWARD = {  # every kernel of notebook 02, as launchers and checks call it
    "course.forward:matmul_v1_kernel": [f"{_M2}, {_M2}, {_M2}", f"{_A2}, {_A2}, {_A2}"],
    "course.forward:matmul_v2_kernel": [f"{_M2}, {_M2}, {_M2}", f"{_A2}, {_A2}, {_A2}"],
    "course.forward:linear_kernel": [f"{_M2}, {_M2}, float32[::1], int64, {_M2}",
                                     f"{_A2}, {_A2}, float32[:], int64, {_A2}"],
}

LOSS = {  # every kernel of notebook 03, as launchers and checks call it
    "course.loss:softmax_xent_kernel": [
        "float32[:, ::1], int64[::1], float32[:, ::1], float32[::1]",
        "float32[:, ::1], int32[::1], float32[:, ::1], float32[::1]",
        "float32[:, :], int64[:], float32[:, :], float32[:]",
        "float32[:, :], int32[:], float32[:, :], float32[:]"],
    "course.loss:sum_kernel": ["float32[::1], float32[::1]", "float32[:], float32[:]"],
    "course.loss:sum_shfl_kernel": ["float32[::1], float32[::1]"],
    "course.loss:zero_kernel": ["float32[::1]", "int32[::1]", "float32[:]"],
    "course.loss:div_kernel": ["float32[::1], float32", "float32[:], float32"],
    "course.loss:count_correct_kernel": ["float32[:, ::1], int64[::1], int32[::1]",
                                         "float32[:, ::1], int32[::1], int32[::1]",
                                         "float32[:, :], int64[:], int32[:]"],
}

GRAD = {  # every kernel of notebook 04, as launchers and checks call it
    "course.grad:dlogits_kernel": [f"{_M2}, int64[::1], {_M2}", f"{_M2}, int32[::1], {_M2}",
                                   f"{_A2}, int64[:], {_A2}"],
    "course.grad:matmul_tn_kernel": [f"{_M2}, {_M2}, {_M2}", f"{_A2}, {_A2}, {_A2}"],
    "course.grad:colsum_kernel": [f"{_M2}, float32[::1]", f"{_A2}, float32[:]"],
    "course.grad:dhidden_kernel": [f"{_M2}, {_M2}, {_M2}, {_M2}", f"{_A2}, {_A2}, {_A2}, {_A2}"],
}

UPDATE = {  # every kernel of notebook 05, as the launchers pass flat buffers ("C" layout, [::1]) and as the
    # checks pass views into guarded buffers ("A" layout, [:])
    "course.update:sgd_kernel": [_sig(2, 1, "::1"), _sig(2, 1, ":")],
    "course.update:momentum_kernel": [_sig(3, 2, "::1"), _sig(3, 2, ":")],
    "course.update:adam_kernel": [_sig(4, 6, "::1"), _sig(4, 6, ":")],
}

TRAIN = {}  # notebook 06 composes earlier kernels and defines none of its own

LANDSCAPE = {  # the kernel of notebook 07, as the launcher and the check call it
    "course.landscape:combine_kernel": [f"{_C1}, {_C1}, {_C1}, float32, float32, {_C1}",
                                        f"{_A1}, {_A1}, {_A1}, float32, float32, {_A1}"],
}

_T = "uint64[:, :, ::1]"   # course.fused's clocks (steps, blocks, NPOINTS)
_STATE = (f"Batch({_M2}, {{y}}, {_I}), Weights({_M2}, {_V}, {_M2}, {_V}), Acts({_M2}, {_M2}, {_M2}, {_M2}), "
          f"Steps(int64, int64, float32, Momentum(float32, boolean, {_M2}, {_V}, {_M2}, {_V}), {_V}, {_T})")
#                 course.fused's namedtuples: X y perm, W1 .. b2, Z .. dH, the steps (their Momentum: its velocities)
_PHASE = _STATE
_STEPS = f"{_STATE}, uint64[::1], float32[:, ::1]"
PERF = {  # every kernel of notebooks 08, 10-12 and 15 (course.perf, course.graphs, course.merged, course.fused, course.matmul), as launchers and checks call it
    "course.perf:empty1_kernel": [_V],
    "course.perf:empty3_kernel": [f"{_V}, {_V}, {_V}"],
    "course.matmul:matmul_v3_kernel": [f"{_M2}, {_M2}, {_M2}", f"{_A2}, {_A2}, {_A2}"],
    "course.matmul:matmul_v4_kernel": [f"{_M2}, {_M2}, {_M2}"],
    "course.matmul:matmul_v5_kernel": [f"{_M2}, {_M2}, {_M2}"],
    "course.graphs:batch_index_kernel": [f"{_I}, {_I}, {_I}", "int64[:], int64[:], int64[:]"],  # launcher, check
    "course.graphs:record_loss_kernel": [f"{_V}, {_I}, {_V}"],
    "course.merged:softmax_xent_grad_kernel": [f"{_M2}, {_I}, {_M2}, {_V}", f"{_M2}, int32[::1], {_M2}, {_V}"],
    "course.merged:grad_wb_kernel": [f"{_M2}, {_M2}, {_M2}, {_V}"],
    "course.merged:sgd_gridstride_kernel": ["float32[::1], float32[::1], float32", "float32[:], float32[:], float32"],
    "course.fused:forward_kernel": [_PHASE.format(y=_I), _PHASE.format(y="int32[::1]")],
    "course.fused:backward_kernel": [_PHASE.format(y=_I), _PHASE.format(y="int32[::1]")],
    "course.fused:update_kernel": [_PHASE.format(y=_I), _PHASE.format(y="int32[::1]")],
    "course.fused:fused_steps_kernel": [_STEPS.format(y=_I), _STEPS.format(y="int32[::1]")],
}

TABLES = {"support": SUPPORT, "data": DATA, "forward": FORWARD, "loss": LOSS, "grad": GRAD, "update": UPDATE,
          "train": TRAIN, "landscape": LANDSCAPE, "perf": PERF}  # topic (course/checks/<topic>.py) -> its table


TUPLES = {"course.fused": ("Batch", "Weights", "Momentum", "Acts", "Steps")}  # namedtuple arguments, by module


def namespace():
    """The names a signature may use: numba's types, and each namedtuple of TUPLES as a function from its fields'
    types to the tuple's type (as numba.typeof gives it for a launch's argument)."""
    import importlib
    from numba import types
    names = {n: getattr(types, n) for n in dir(types) if not n.startswith("_")}
    for module, classes in TUPLES.items():
        for name in classes:
            cls = getattr(importlib.import_module(module), name)
            names[name] = lambda *fields, cls=cls: types.BaseTuple.from_types(fields, cls)
    return names


def all_signatures():
    """Every table merged: "module:kernel" -> [signature, ...]."""
    merged = {}
    for table in TABLES.values():
        merged.update(table)
    return merged
