"""The compile gate's two halves: describe a kernel (its source and the globals it names) so that another process
can rebuild it, and a worker process that compiles it for a real GPU (sm_90) without one.

The simulator runs kernels as Python and never compiles them, so without this a student without a GPU passes
what fails at the first compile on a GPU (a generator expression, `np.dot`, `try/except`) and float64 arithmetic
in a float32 kernel passes everywhere. In simulator mode `course.checks.core` starts one worker
(`python -m course.runtime.gate`, in GPU mode: numba-cuda compiles without a driver) and sends it each kernel it
checks, as a JSON line; on a GPU it compiles in its own process (`analyse`). The worker answers with numba's
reason for refusing the kernel, or the lines that compute in float64."""
import atexit
import base64
import dis
import inspect
import json
import linecache
import os
import pickle
import subprocess
import sys
import textwrap
import threading

CC = (9, 0)  # Hopper, as course/tools/compile.py: typing and lowering do not depend on it
ANSWER_TIMEOUT = 120.0  # seconds for one answer of the worker (its first one imports numba-cuda, about 3 s)


class Untransportable(Exception):
    """A global the kernel names cannot be sent to the worker (a closure, an object without a value form)."""


# --- the kernel's description (in the checking process) ----------------------------------------------------

def _global_names(code):
    """The names a code object (and code nested in it) loads as globals."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            names |= _global_names(const)
    return names


def _importable(obj):
    """(module, name) if obj is what `from module import name` gives in a fresh process (a course kernel), else
    None: a notebook's or a test's function has to travel as source."""
    py = getattr(obj, "py_func", obj)
    mod, name = getattr(py, "__module__", None), getattr(py, "__name__", None)
    m = sys.modules.get(mod or "")
    if m is None or mod == "__main__" or getattr(m, name, None) is not obj:
        return None
    return mod, name


def _is_device_function(fn):
    device = getattr(fn, "_device", None)  # the simulator's kernels
    if device is None:
        device = getattr(fn, "targetoptions", {}).get("device", False)
    return bool(device)


def _entry(value, seen):
    """How one global travels: a module by name, an importable function by name, a jitted function as its
    description, anything else as a pickled value."""
    if inspect.ismodule(value):
        return ["module", value.__name__]
    if hasattr(value, "py_func"):
        where = _importable(value)
        return ["import", *where] if where else ["function", describe(value, seen)]
    if inspect.isfunction(value) or inspect.isclass(value) or inspect.isbuiltin(value):
        where = _importable(value)
        if where is None:
            raise Untransportable(f"{value!r}")
        return ["import", *where]
    try:
        return ["value", base64.b64encode(pickle.dumps(value)).decode()]
    except Exception as e:
        raise Untransportable(f"{type(value).__name__}: {e}") from None


def describe(fn, seen=None):
    """A JSON-able description of a jitted function: its source (without decorators, at its own line numbers),
    its file name, whether it is a device function, and each global it names (`_entry`)."""
    seen = set() if seen is None else seen
    py = getattr(fn, "py_func", fn)
    if py.__closure__:
        raise Untransportable(f"{py.__name__} uses variables of an enclosing function")
    if id(py) in seen:
        raise Untransportable(f"{py.__name__} calls itself")
    seen.add(id(py))
    lines, first = inspect.getsourcelines(py)
    src = textwrap.dedent("".join(lines))
    body = src.splitlines(True)
    start = next(k for k, line in enumerate(body) if line.lstrip().startswith("def "))
    source = "\n" * (first - 1 + start) + "".join(body[start:])  # decorators dropped, line numbers kept
    g, builtins = py.__globals__, vars(__builtins__) if isinstance(__builtins__, type(sys)) else __builtins__
    names = {n: _entry(g[n], seen) for n in sorted(_global_names(py.__code__)) if n in g}
    missing = [n for n in _global_names(py.__code__) if n not in g and n not in builtins]
    return dict(name=py.__name__, filename=py.__code__.co_filename, source=source,
                device=_is_device_function(fn), globals=names, missing=missing)


def arg_type(a):
    """A kernel argument's type as the worker rebuilds it: ["array", dtype, ndim, layout] or ["scalar", dtype]."""
    import numpy as np
    if hasattr(a, "shape") and hasattr(a, "dtype") and getattr(a, "ndim", 0) > 0:
        return ["array", np.dtype(a.dtype).name, a.ndim, "C" if _c_contiguous(a) else "A"]
    if isinstance(a, bool):
        return ["scalar", "bool"]
    if isinstance(a, int):
        return ["scalar", "int64"]
    if isinstance(a, float):
        return ["scalar", "float64"]
    return ["scalar", np.asarray(a).dtype.name]


def _c_contiguous(a):
    """Whether a (device or host) array is C-contiguous, as numba's typeof decides its layout."""
    expected = a.dtype.itemsize
    for n, s in zip(reversed(a.shape), reversed(a.strides)):
        if n > 1 and s != expected:
            return False
        expected *= n
    return True


# --- the worker (GPU mode, no GPU needed) -----------------------------------------------------------------

def rebuild(spec):
    """The jitted function a description stands for, in this (GPU mode) process."""
    import importlib
    from numba import cuda
    ns = {"__builtins__": __builtins__, "__name__": f"course_gate_{spec['name']}"}
    for name, (kind, *rest) in spec["globals"].items():
        if kind == "module":
            ns[name] = importlib.import_module(rest[0])
        elif kind == "import":
            ns[name] = getattr(importlib.import_module(rest[0]), rest[1])
        elif kind == "function":
            ns[name] = rebuild(rest[0])
        else:
            ns[name] = pickle.loads(base64.b64decode(rest[0]))
    exec(compile(spec["source"], spec["filename"], "exec"), ns)
    fn = ns[spec["name"]]
    return cuda.jit(device=True)(fn) if spec["device"] else cuda.jit(fn)


def numba_types(argtypes):
    """The numba types of arg_type's descriptions."""
    import numpy as np
    from numba import types
    from numba.np.numpy_support import from_dtype
    out = []
    for kind, dtype, *shape in argtypes:
        t = types.boolean if dtype == "bool" else from_dtype(np.dtype(dtype))
        out.append(types.Array(t, shape[0], shape[1]) if kind == "array" else t)
    return tuple(out)


def called_device_functions(fn, _seen=None):
    """The jitted device functions fn's code names as globals, and those they name, in turn."""
    _seen = set() if _seen is None else _seen
    py = getattr(fn, "py_func", fn)
    out = []
    for n in sorted(_global_names(py.__code__)):
        d = py.__globals__.get(n)
        if hasattr(d, "py_func") and _is_device_function(d) and id(d) not in _seen:
            _seen.add(id(d))
            out += [d, *called_device_functions(d, _seen)]
    return out


def analyse(kernel, argtypes):
    """Compile kernel for CC with argtypes (numba types) in this GPU-mode process; return dict(error=numba's
    reason or None, float64=[[file, line, function, made], ...]: the statements of the kernel and of the device
    functions it calls that compute in float64, after the assignments of bare numbers they start from, made=True)."""
    from course.runtime.device import compile_errors, float64_statements, numba_reason, pretend_device
    with pretend_device(CC):
        try:
            found = float64_statements(kernel, argtypes, CC, called_device_functions(kernel))
        except compile_errors() as e:
            return dict(error=numba_reason(e), float64=[])
    return dict(error=None, float64=found)


def serve(stdin, stdout):
    """Answer one JSON request per line: {"kernel": description, "args": arg types} -> analyse's dict, or
    {"skip": reason} when the description could not be rebuilt here (the check then goes on without the gate)."""
    for line in stdin:
        req = json.loads(line)
        try:
            answer = analyse(rebuild(req["kernel"]), numba_types(req["args"]))
        except Exception as e:
            answer = {"skip": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()


class Worker:
    """The GPU-mode process that compiles for the simulator's checks; started on first use, one per process."""

    def __init__(self):
        env = {**os.environ, "COURSE_DEVICE": "gpu", "NUMBA_ENABLE_CUDASIM": "0",
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.proc = subprocess.Popen([sys.executable, "-m", "course.runtime.gate"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.lock = threading.Lock()
        atexit.register(self.close)

    def close(self):
        """End the worker (at exit): it stops at the end of its input."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def ask(self, spec, argtypes):
        """The worker's answer (analyse's dict or {"skip": why}); {"skip": ...} if it died or took too long."""
        with self.lock:
            if self.proc.poll() is not None:
                return {"skip": "the compile worker is not running"}
            self.proc.stdin.write(json.dumps({"kernel": spec, "args": argtypes}) + "\n")
            self.proc.stdin.flush()
            answer = []
            reader = threading.Thread(target=lambda: answer.append(self.proc.stdout.readline()), daemon=True)
            reader.start()
            reader.join(ANSWER_TIMEOUT)
            if not answer or not answer[0]:
                self.proc.kill()
                return {"skip": "the compile worker did not answer"}
            return json.loads(answer[0])


def source_line(filename, line):
    """The code of a source line, without its comment (a notebook cell's too: IPython keeps cells in linecache)."""
    return linecache.getline(filename, line).split("  #")[0].strip()


def main():
    import course
    if course.SIMULATOR:
        print("run with COURSE_DEVICE=gpu: the simulator cannot compile", file=sys.stderr)
        return 2
    serve(sys.stdin, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
