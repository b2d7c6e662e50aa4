"""Which function runs each exercise's piece: the course's own, unless course.use_mine() registered the student's.

Every place in the course that runs an exercise's piece asks here, in one line where it calls it:
`registry.pick("5.1", sgd_kernel)[grid, block](p, g, lr)` runs the student's SGD kernel if use_mine() registered
it, else the course's. A device function that the course's kernels call (the fused kernel's tile_origin) cannot be
swapped at a launch: `registry.with_pieces(kernel, {"tile_origin": "11.1"})` gives a copy of the kernel, and of
its module's device functions, that calls the student's where registered (built once per choice). Nothing else
(no module attribute) changes: course/runtime/mine.py decides what is registered."""
import types

JITTED = ("CUDADispatcher", "FakeCUDAKernel")  # numba-cuda's kernels and device functions, real and simulated
_CHOSEN = {}    # exercise ("5.1") -> the student's function that runs it
_VARIANTS = {}  # (id of the module's globals, ((name, id of the student's function), ...)) -> (globals, functions)


def register(key, fn):
    """Run `fn` wherever the course runs exercise `key`'s piece (each call site's pick asks)."""
    _CHOSEN[key] = fn


def clear():
    """Run the course's own everywhere again."""
    _CHOSEN.clear()


def registered():
    """{exercise: the student's function} registered now."""
    return dict(_CHOSEN)


def pick(key, default):
    """The student's registered function for exercise `key`, else `default` (the course's)."""
    return _CHOSEN.get(key, default)


def _jitted(v):
    """The numba kernel or device function `v` is or wraps (a student build's guard has `.kernel`), else None."""
    v = getattr(v, "kernel", v)
    return v if type(v).__name__ in JITTED else None


def _variant(g, chosen):
    """A copy of module globals `g` where each name of `chosen` holds the student's function and every kernel and
    device function defined in the module is recompiled from a copy of its code that reads the copy."""
    from course.runtime.device import rejit
    new = dict(g)
    new.update(chosen)
    for name, v in g.items():
        k = _jitted(v)
        if name in chosen or k is None or getattr(k.py_func, "__globals__", None) is not g:
            continue
        py = k.py_func
        fn = types.FunctionType(py.__code__, new, py.__name__, py.__defaults__, py.__closure__)
        fn.__kwdefaults__, fn.__qualname__ = py.__kwdefaults__, py.__qualname__
        copy = rejit(k, fn)
        new[name] = copy if k is v else type(v)(copy)  # a guard stays a guard, around the copy
    return new


def with_pieces(kernel, pieces):
    """`kernel`, or its copy that calls the student's registered device functions: pieces {name of a device function
    in the kernel's module: its exercise}. The copies of one choice are made once and reused (compiled once)."""
    k = _jitted(kernel)
    g = k.py_func.__globals__
    chosen = {name: _CHOSEN[key] for name, key in pieces.items() if key in _CHOSEN}
    if not chosen:
        return kernel
    cache_key = (id(g), tuple(sorted((name, id(fn)) for name, fn in chosen.items())))
    if cache_key not in _VARIANTS:
        _VARIANTS[cache_key] = (_variant(g, chosen), g, list(chosen.values()))  # (kept alive: the ids stay theirs)
    name = next(n for n, v in g.items() if v is kernel)
    return _VARIANTS[cache_key][0][name]
