"""The CPU executor: a numba-cuda kernel compiled for the CPU by numba.njit and run as loops over its grid.

`import course` without a GPU (or with COURSE_DEVICE=cpu) routes every launch `kernel[grid, block](...)` of a
simulator kernel here; the exercise checks and `simulating()` keep numba's CUDA simulator, which catches races,
divergent barriers and out-of-bounds reads as they happen. The technique is MCUDA's (Stratton et al., 2008):

1. the kernel's `py_func` source is parsed (`ast`), its device functions inlined (those with barriers) or compiled
   beside it (the others), and every `cuda.*` name rewritten to the loop variables and launch constants;
2. the body is cut at each `cuda.syncthreads()` into regions; each region becomes a function run once per thread of
   the block, in order; a loop or `if` that holds a barrier stays outside the thread loops, its condition checked
   equal for every thread (a divergent barrier raises, as it hangs or corrupts on a GPU);
3. a variable used in two regions lives in an array indexed by the thread (its type from numba's inference of the
   kernel run as one thread); shared arrays are one array per block; atomics are plain read-modify-writes (the
   threads and blocks run one after another, in order);
4. the generated module keeps the kernel's file name and line numbers, and runs under `njit(boundscheck=True)`:
   an index out of bounds raises IndexError, as in the simulator, and so does a negative one (NumPy's rule would
   wrap it); numba's message names no line, so the failing block runs again as Python, which names them all;
5. its loops poll the clock now and then (`_Guard`): a launch stops at the simulator's deadline
   (course.device.launch_deadline) or at a Ctrl-C, in one line naming the kernel. Launch configurations a GPU
   refuses, and warp shuffles, are refused before it runs (course.device.check_launch, refuse_shuffles).

A kernel the executor cannot run (a grid-wide barrier, dynamic shared memory, ...) runs in the
simulator instead, after a one-line note on stderr naming the kernel and the construct (for the course's own kernels,
which use such things on purpose, only in `fallbacks()`). The executor runs kernels correctly and fast; its times are a
CPU's, not a GPU's, and it cannot show a race (its threads never overlap)."""
import ast
import contextlib
import ctypes
import inspect
import itertools
import math
import sys
import textwrap
import time

import numpy as np

WARP = 32                 # cuda.warpsize; cuda.laneid is the thread's index modulo this
NAME = "CPU executor"     # how labels name it
EXITED, RUNNING = 1, 0    # what a region function returns: the thread returned, or it carries on
AXES = "xyz"
ATOMICS = ("add", "sub", "max", "min", "exch")
NO_OPS = ("threadfence", "threadfence_block", "threadfence_system")
POLL_TICKS = 2**18       # a generated loop looks at the clock and for a Ctrl-C once in this many iterations
AT = 9                   # at__c: the blocks to run (x, y, z from; x, y, z to), then the block running now (x, y, z)
_CTX = ("tid__c", "bx__c", "by__c", "bz__c", "gdx__c", "gdy__c", "gdz__c")  # every generated function's first args


class Unsupported(Exception):
    """A construct the executor does not run: the kernel goes to the simulator."""

    def __init__(self, what, node=None):
        line = getattr(node, "lineno", None)
        super().__init__(f"{what} (line {line})" if line else what)


# ---- the switch: which launches come here -------------------------------------------------------------------

_state = {"on": False, "off_depth": 0}
_notes = {}        # kernel py_func -> why it runs in the simulator (reported once)
_cache = {}        # (py_func, block, argument types) -> compiled launch, or the Unsupported message


def active():
    """True when launches run on the executor now (the mode, and no `simulating()` block around)."""
    return _state["on"] and _state["off_depth"] == 0


def enable(on=True):
    """Route launches of simulator kernels to the executor (on) or to the simulator (off) from now on."""
    from course.runtime import device
    device.route_launches(_launch)
    _state["on"] = bool(on)


@contextlib.contextmanager
def simulating():
    """Inside: every launch runs in numba's CUDA simulator (the checks use it: races, barriers, bounds)."""
    _state["off_depth"] += 1
    try:
        yield
    finally:
        _state["off_depth"] -= 1


@contextlib.contextmanager
def running():
    """Inside: launches run on the executor, whatever the mode (the tests use it in the simulator)."""
    before = _state["on"]
    enable(True)
    depth, _state["off_depth"] = _state["off_depth"], 0
    try:
        yield
    finally:
        _state["on"], _state["off_depth"] = before, depth


# ---- launching ------------------------------------------------------------------------------------------------

def _launch(kernel, grid, block, dynshared, args):
    """The device hook: run this launch on the executor and return True, or return False for the simulator."""
    if not active():
        return False
    py = kernel.py_func
    if dynshared:
        return _fallback(py, "dynamic shared memory (a 4th launch argument)")
    from course.runtime import device
    arrays = tuple(device.host_view(a) for a in args)
    try:
        key = (py, tuple(block), tuple(_typeof(a) for a in arrays))
    except Unsupported as e:
        return _fallback(py, str(e))
    compiled = _cache.get(key)
    if compiled is None:
        with _ctrl_c_after():
            compiled = _cache[key] = _compile(py, tuple(block), key[2])
    if isinstance(compiled, str):
        return _fallback(py, compiled)
    at = np.array([0, 0, 0, *grid, 0, 0, 0], np.int64)
    try:
        with _watched(py.__name__):
            compiled.launch(*grid, at, *arrays)
    except IndexError as e:
        raise IndexError(_out_of_bounds(py, compiled, grid, at, arrays, e)) from None
    return True


def _ix(i):
    """An index into an array in a kernel, refused when negative (numba and NumPy would wrap it to the end)."""
    if i < 0:
        from course.runtime.device import negative_index
        raise IndexError(negative_index(i))
    return i


def _out_of_bounds(py, compiled, grid, at, arrays, e):
    """One line for an index out of bounds on the executor: numba's compiled code says only 'index is out of
    bounds', so the failing block (at[6:9]) runs again as Python, on copies of the arrays, which names the line,
    the thread, the index and the size (NumPy's message)."""
    block = [int(b) for b in at[6:9]]
    where = f"{py.__name__}, block {_xyz(block)}"
    rerun = np.array([*block, *(b + 1 for b in block), 0, 0, 0], np.int64)
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
    try:
        with _watched(py.__name__):
            compiled.python["launch__c"](*grid, rerun, *copies)
    except IndexError as again:
        frame = _kernel_frame(again.__traceback__, py.__code__.co_filename)
        if frame is not None:
            line, thread = _frame_where(frame, compiled.block)
            return f"{py.__name__}, {line}, block {_xyz(block)}{thread}: {again}"
    except Exception:  # noqa: BLE001 (the Python run went otherwise: a division by zero, the deadline)
        pass
    return f"{where}: {e} (numba's CPU code names no line; run the launch inside course.cpu.simulating() to see it)"


def _frame_where(frame, block):
    """('line 12' (of the kernel) or 'line 40 of tile_dot' (a device function), ', thread 5' or ''), from a frame of
    the generated code run as Python."""
    name = frame.f_code.co_name
    where = f"line {frame.f_lineno}" + (f" of {name.rsplit('__d', 1)[0]}" if "__d" in name else "")
    tid = frame.f_locals.get("tid__c")
    if tid is None:
        return where, ""
    tid = int(tid)
    return where, f", thread {_xyz([tid % block[0], tid // block[0] % block[1], tid // (block[0] * block[1])])}"


def _kernel_frame(tb, filename):
    """The innermost frame of a traceback in the kernel's file (the generated code keeps its name and lines)."""
    found = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            found = tb.tb_frame
        tb = tb.tb_next
    return found


def _xyz(v):
    """[3, 0, 0] -> '3', [3, 1, 0] -> '(3, 1)': a block's or thread's index, written as launches are."""
    from course.runtime.device import dims_text   # lazily: device installs this executor
    return dims_text(v, trailing=0)


class _Compiled:
    """A compiled launch (njit) and the same generated functions as plain Python (for _out_of_bounds)."""

    def __init__(self, launch, python, block):
        self.launch, self.python, self.block = launch, python, tuple(block) + (1,) * (3 - len(block))


class _Stop(RuntimeError):
    """Raised by a generated loop when the launch must stop (its deadline passed, or a Ctrl-C came)."""


_watch = {"deadline": math.inf, "ctrl_c": []}   # the running launch's: what _poll looks at


@ctypes.CFUNCTYPE(ctypes.c_int)
def _poll():
    """What every generated loop calls once in POLL_TICKS iterations (numba cannot be interrupted from Python):
    1 when the launch must stop."""
    return 1 if _watch["ctrl_c"] or time.monotonic() > _watch["deadline"] else 0


@contextlib.contextmanager
def _watched(name):
    """Run a launch under the simulator's deadline (course.device.launch_deadline, $COURSE_SIM_DEADLINE) and stop it
    at a Ctrl-C: one line naming the kernel either way. A Ctrl-C is recorded (as _ctrl_c_after does) and seen by
    the compiled loops through _poll; one that comes as the launch ends is raised after it."""
    from course.runtime import device
    limit = device.launch_deadline()
    _watch["deadline"], got = time.monotonic() + limit, []
    _watch["ctrl_c"] = got
    try:
        with _ctrl_c_after(got, f"{name} was interrupted (Ctrl-C) on the {NAME}"):
            try:
                yield
            except _Stop:
                if not got:
                    raise device.LaunchDeadline(
                        f"{name} ran for more than {limit:g} s on the {NAME}: a thread waiting for something "
                        f"that never happens, or a grid far larger than the data? ({device.DEADLINE_ENV}=SECONDS "
                        "changes the limit)") from None
    finally:
        _watch["deadline"], _watch["ctrl_c"] = math.inf, []


def _typeof(a):
    """numba's type of one launch argument (arrays, numbers, booleans)."""
    import numba
    if isinstance(a, (np.ndarray, np.generic, bool, int, float)):
        return numba.typeof(a)
    raise Unsupported(f"an argument of type {type(a).__name__}")


def _fallback(py, why):
    """Say once per kernel (once for a factory's copies of one kernel) that it runs in the simulator, and why (on
    stderr; for the course's own kernels, which use what only a GPU has on purpose, only in fallbacks()); tell the
    hook to use the simulator."""
    if py not in _notes:
        said = (py.__name__, why) in {(f.__name__, w) for f, w in _notes.items()}   # a factory's copies: said once
        _notes[py] = why
        if not said and not str(py.__module__).startswith("course."):
            print(f"course.runtime.cpu: {py.__name__} runs in the simulator: the {NAME} does not support {why}",
                  file=sys.stderr)
    return False


def fallbacks():
    """(kernel name, why) for every kernel that fell back to the simulator in this process, in order."""
    return [(py.__name__, why) for py, why in _notes.items()]


@contextlib.contextmanager
def _ctrl_c_after(got=None, message=None):
    """A Ctrl-C during the block is raised when it ends, not inside it (numba's compiles need this); `got`, a list,
    receives it as it comes; `message`: the KeyboardInterrupt's (under Python's own handler).

    numba's CPU compiler calls back into Python through ctypes (llvmlite's object-cache hook); a KeyboardInterrupt
    raised in such a callback is printed and dropped by ctypes, and the compile, then the training, carries on: a
    Ctrl-C lost about one time in two when it came during a `course train` compile."""
    import signal
    import threading
    before = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(before):
        yield                             # only the main thread handles signals; SIG_IGN/SIG_DFL need no help
        return
    got = [] if got is None else got
    signal.signal(signal.SIGINT, lambda signum, frame: got.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
        if got:
            if message and before is signal.default_int_handler:
                raise KeyboardInterrupt(message) from None
            before(signal.SIGINT, got[0])  # as if it came now: default_int_handler raises KeyboardInterrupt


def _compile(py, block, types):
    """The compiled launch function for this kernel, block shape and argument types, or why it cannot be."""
    import numba
    from numba.core.errors import NumbaError
    try:
        _, ns, launch_name, python = translate(py, block, types)
        launch = ns[launch_name]
        launch.compile((numba.int64,) * 3 + (numba.typeof(np.zeros(AT, np.int64)),) + tuple(types))
    except Unsupported as e:
        return str(e)
    except NumbaError as e:
        first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
        return f"what numba's CPU compiler says: {first.strip()[:160]}"
    except Exception as e:  # a construct the translation mishandles: the simulator still runs the kernel
        return f"this kernel (an error in the executor's translation, {type(e).__name__}: {str(e)[:120]})"
    return _Compiled(launch, python, block)


# ---- the translation ----------------------------------------------------------------------------------------

def translate(py, block, types):
    """(the generated module as an ast, its namespace with every function jitted, the launch function's name, a
    namespace with the same functions as plain Python)."""
    import numba
    k = _Kernel(py, block)
    typemap = k.probe_types(types) if k.expanded else {}
    module = _Guard(k.nthreads).visit(k.generate(typemap))
    code = compile(module, py.__code__.co_filename, "exec")
    ns, python = k.namespace(), k.namespace(python=True)
    exec(code, ns)
    exec(code, python)
    for name in k.functions:
        ns[name] = numba.njit(boundscheck=True, error_model="numpy")(ns[name])
    return module, ns, "launch__c", python


def _is_cuda(node, g):
    """True for a Name bound to numba.cuda (or the simulator's stand-in) in the kernel's globals."""
    if not isinstance(node, ast.Name):
        return False
    v = g.get(node.id)
    return getattr(v, "__name__", "") in ("numba.cuda", "numba_cuda.numba.cuda") or type(v).__name__ == "FakeCUDAModule"


def _cuda_path(node, g):
    """('threadIdx', 'x') for cuda.threadIdx.x, ('grid',) for cuda.grid, ... or None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return tuple(reversed(parts)) if parts and _is_cuda(node, g) else None


def _device_fn(node, g):
    """The py_func of the simulator device function a call's name refers to, or None."""
    if isinstance(node, ast.Name):
        v = g.get(node.id)
        if type(v).__name__ == "FakeCUDAKernel" and getattr(v, "_device", False):
            return v.py_func
    return None


def _fn_def(py):
    """The FunctionDef of a function's source, at its original line numbers, without decorators."""
    try:
        src = textwrap.dedent(inspect.getsource(py))
    except (OSError, TypeError) as e:
        raise Unsupported(f"a kernel whose source cannot be read ({e})")
    tree = ast.parse(src)
    ast.increment_lineno(tree, py.__code__.co_firstlineno - 1)
    fn = tree.body[0]
    if not isinstance(fn, ast.FunctionDef):
        raise Unsupported("a kernel that is not a plain def")
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
        raise Unsupported("default, keyword-only or variable arguments", fn)
    fn.decorator_list = []
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and len(body) > 1:
        fn.body = body[1:]  # the docstring
    return fn


def _has_barrier(nodes, g, seen=()):
    """True if these statements (or a device function they call) contain cuda.syncthreads()."""
    for n in nodes:
        for sub in ast.walk(n):
            if isinstance(sub, ast.Call):
                if _cuda_path(sub.func, g) == ("syncthreads",) or (
                        isinstance(sub.func, ast.Name) and sub.func.id == "syncthreads__c"):
                    return True
                dev = _device_fn(sub.func, g)
                if dev is not None and dev not in seen and _has_barrier(_fn_def(dev).body, dev.__globals__,
                                                                        seen + (dev,)):
                    return True
    return False


def _names(nodes, ctx=None):
    """Names in these nodes (Store or Load only when ctx says)."""
    out = set()
    for n in nodes:
        for sub in ast.walk(n):
            if isinstance(sub, ast.Name) and (ctx is None or isinstance(sub.ctx, ctx)):
                out.add(sub.id)
    return out


def _sane(tree):
    """Make every node's source range valid (end not before start) after the rewriting moved nodes around."""
    for n in ast.walk(tree):
        if "lineno" not in n._attributes or getattr(n, "lineno", None) is None:
            continue
        if getattr(n, "end_lineno", None) is None or n.end_lineno < n.lineno:
            n.end_lineno = n.lineno
        if n.end_lineno == n.lineno and (getattr(n, "end_col_offset", None) is None
                                         or n.end_col_offset < n.col_offset):
            n.end_col_offset = n.col_offset
    return tree


def _fndef(name, args, body):
    """A FunctionDef node of these positional arguments (ast.arg) and statements."""
    a = ast.arguments(posonlyargs=[], args=args, vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    fd = ast.FunctionDef(name=name, args=a, body=body, decorator_list=[], returns=None, type_comment=None)
    if "type_params" in ast.FunctionDef._fields:
        fd.type_params = []
    return fd


class _Rename(ast.NodeTransformer):
    def __init__(self, mapping):
        self.mapping = mapping

    def visit_Name(self, node):
        if node.id in self.mapping:
            return ast.copy_location(ast.Name(self.mapping[node.id], node.ctx), node)
        return node


class _Kernel:
    """One kernel at one block shape: its body inlined, rewritten and split at the barriers."""

    def __init__(self, py, block):
        self.py, self.block = py, tuple(block) + (1,) * (3 - len(block))
        self.nthreads = int(np.prod(self.block))
        self.g = dict(py.__globals__)
        if py.__closure__:
            self.g.update(zip(py.__code__.co_freevars, (c.cell_contents for c in py.__closure__)))
        self.consts, self.functions, self.devices, self.device_defs = {}, [], {}, []
        self.counter = itertools.count()
        fn = _fn_def(py)
        self.params = [a.arg for a in fn.args.args]
        body = self._inline_all(fn.body, self.g)
        assigned = _names(body, ast.Store)
        renamed = {p: f"{p}__v" for p in self.params if p in assigned}    # a parameter the kernel reassigns
        body = [_Rename(renamed).visit(s) for s in body]
        body = [ast.Assign([ast.Name(v, ast.Store())], ast.Name(p, ast.Load()), lineno=fn.lineno, col_offset=0)
                for p, v in renamed.items()] + body
        self.shared = {}                                                    # name -> (shape, dtype name)
        self.local_shapes = {}                            # local array name -> [(shape, dtype name), declarations]
        body = self._rewrite(body)
        self.tree = self._split(body)
        self._classify()

    # -- device functions --

    def _inline_all(self, stmts, g):
        """Statements with every call of a device function that holds a barrier replaced by its body."""
        out = []
        for s in stmts:
            out.extend(self._inline_stmt(s, g))
        return out

    def _inline_stmt(self, s, g):
        for field in ("body", "orelse"):
            if isinstance(getattr(s, field, None), list) and not isinstance(s, ast.FunctionDef):
                setattr(s, field, self._inline_all(getattr(s, field), g))
        value = getattr(s, "value", None)
        dev = _device_fn(value.func, g) if isinstance(value, ast.Call) else None
        if dev is None or not _has_barrier(_fn_def(dev).body, dev.__globals__):
            for sub in ast.walk(s):
                if isinstance(sub, ast.Call):
                    d = _device_fn(sub.func, g)
                    if d is not None and _has_barrier(_fn_def(d).body, d.__globals__):
                        raise Unsupported(f"a call of {d.__name__} (it holds a barrier) inside an expression", sub)
            return [s]
        if dev.__globals__ is not self.g and dev.__globals__ is not g:
            self._merge_globals(dev)
        if not isinstance(s, (ast.Assign, ast.Expr)) or (isinstance(s, ast.Assign) and len(s.targets) != 1):
            raise Unsupported(f"a call of {dev.__name__} (it holds a barrier) other than `x = f(...)` or `f(...)`", s)
        if value.keywords:
            raise Unsupported("keyword arguments to a device function", s)
        fd = _fn_def(dev)
        k = next(self.counter)
        local = _names(fd.body, ast.Store) | {a.arg for a in fd.args.args}
        mapping = {n: f"{n}__i{k}" for n in local}
        returns = [n for b in fd.body for n in ast.walk(b) if isinstance(n, ast.Return)]
        if returns and (len(returns) > 1 or fd.body[-1] is not returns[0]):
            raise Unsupported(f"{dev.__name__}: a device function with a barrier and a return before its end",
                              returns[0])
        if len(value.args) != len(fd.args.args):
            raise Unsupported(f"a call of {dev.__name__} with {len(value.args)} arguments", s)
        stored = _names(fd.body, ast.Store)
        binds = []
        for a, arg in zip(fd.args.args, value.args):
            if isinstance(arg, ast.Name) and a.arg not in stored:
                mapping[a.arg] = arg.id          # an array or a value the callee only reads: the caller's name
            else:
                binds.append(ast.copy_location(ast.Assign([ast.Name(f"{a.arg}__i{k}", ast.Store())], arg), s))
        body = [_Rename(mapping).visit(b) for b in fd.body]
        result = body.pop().value if returns else None
        out = binds + self._inline_all(body, dev.__globals__)
        if isinstance(s, ast.Assign):
            out.append(ast.copy_location(ast.Assign(s.targets, result or ast.Constant(None)), s))
        return out

    def _merge_globals(self, dev):
        """Add a device function's module globals (another module's) to the kernel's, refusing a clash."""
        for name, v in dev.__globals__.items():
            if name in self.g and self.g[name] is not v and not name.startswith("__"):
                raise Unsupported(f"{dev.__name__} (another module) uses a name `{name}` the kernel's module binds "
                                  "to something else")
            self.g.setdefault(name, v)

    def _device_njit(self, dev):
        """The name of a generated njit function for a device function without barriers (made once)."""
        if dev in self.devices:
            return self.devices[dev]
        name = f"{dev.__name__}__d{next(self.counter)}"
        self.devices[dev] = name
        self._merge_globals(dev)
        fd = _fn_def(dev)
        body = self._rewrite(fd.body, in_device=True)
        fd.name = name
        fd.args.args = [ast.arg(c) for c in _CTX] + fd.args.args
        fd.body = self._thread_prologue(fd) + body
        self.device_defs.append(fd)
        self.functions.append(name)
        return name

    # -- cuda.* names --

    def _rewrite(self, stmts, in_device=False):
        """The statements with every cuda.* rewritten (a shared array's declaration dropped: made per block)."""
        out = []
        for s in stmts:
            r = _CudaRewriter(self, in_device).visit(s)
            out.extend([] if r is None else r if isinstance(r, list) else [r])
        return out

    def const(self, value):
        """A name in the generated module's globals bound to value (a dtype, a shape)."""
        name = f"c{next(self.counter)}__c"
        self.consts[name] = value
        return name

    def dtype_name(self, node):
        """The generated module's name for the NumPy scalar type a dtype expression (float32, np.int32) means."""
        from numba.np import numpy_support
        value = self._eval(node)
        try:
            dt = numpy_support.as_dtype(value) if not isinstance(value, (type, np.dtype)) else np.dtype(value)
        except Exception:
            raise Unsupported(f"the dtype {ast.unparse(node)}", node)
        return self.const(dt.type)

    def shape_value(self, node):
        """A constant shape expression (TILE, (LANES, COLS)) evaluated in the kernel's globals: a tuple of ints."""
        value = self._eval(node)
        shape = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
        if not all(isinstance(s, (int, np.integer)) and s > 0 for s in shape):
            raise Unsupported(f"the shape {ast.unparse(node)} (a tuple of positive constants is)", node)
        return tuple(int(s) for s in shape)

    def _eval(self, node):
        """An expression of the kernel's module constants, evaluated now (numba freezes globals the same way)."""
        try:
            return eval(compile(ast.Expression(node), "<shape>", "eval"), self.g)
        except Exception:
            raise Unsupported(f"the expression {ast.unparse(node)} (it must be a constant of the module)", node)

    # -- barriers --

    def _split(self, stmts):
        """A list of parts: ("region", stmts), ("barrier",), ("while", test, parts), ("if", test, parts, parts)."""
        parts, run = [], []
        for s in stmts:
            if not _has_barrier([s], self.g):
                run.append(s)
                continue
            if run:
                parts.append(("region", run))
                run = []
            if isinstance(s, ast.Expr) and getattr(s.value, "func", None) is not None and \
                    isinstance(s.value.func, ast.Name) and s.value.func.id == "syncthreads__c":
                parts.append(("barrier",))
            elif isinstance(s, ast.While) and not s.orelse:
                self._no_jumps(s.body, s)
                parts.append(("while", s.test, self._split(s.body)))
            elif isinstance(s, ast.For) and not s.orelse:
                self._no_jumps(s.body, s)
                init, test, step = self._for_as_while(s)
                parts.append(("region", init))
                parts.append(("while", test, self._split(s.body + step)))
            elif isinstance(s, ast.If):
                parts.append(("if", s.test, self._split(s.body), self._split(s.orelse)))
            else:
                raise Unsupported(f"a barrier inside `{type(s).__name__.lower()}`", s)
        if run:
            parts.append(("region", run))
        return parts

    def _no_jumps(self, body, loop):
        """A break or continue of a loop that holds a barrier would leave threads at different barriers."""
        for s in body:
            for sub in ast.walk(s):
                if isinstance(sub, (ast.Break, ast.Continue)) and not self._inside_inner_loop(s, sub):
                    raise Unsupported("break or continue in a loop that holds a barrier", sub)

    @staticmethod
    def _inside_inner_loop(stmt, target):
        """True when `target` (a break or continue) belongs to a loop inside `stmt`, not to the one around it."""
        for loop in ast.walk(stmt):
            if isinstance(loop, (ast.For, ast.While)):
                if any(n is target for b in loop.body for n in ast.walk(b)):
                    return True
        return False

    def _for_as_while(self, s):
        """`for v in range(a, b, c)` holding a barrier -> (v = a; stop = b; step = c), the test, v += step."""
        it = s.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and 1 <= len(it.args) <= 3 and isinstance(s.target, ast.Name)):
            raise Unsupported("a loop holding a barrier that is not `for name in range(...)`", s)
        args = it.args
        start, stop, step = (ast.Constant(0), args[0], ast.Constant(1)) if len(args) == 1 else \
            (args[0], args[1], args[2] if len(args) == 3 else ast.Constant(1))
        k = next(self.counter)
        v, hi, st = s.target.id, f"stop__r{k}", f"step__r{k}"

        def assign(name, value):
            return ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], value), s)

        init = [assign(hi, stop), assign(st, step), assign(v, start)]
        test = ast.parse(f"({v} < {hi}) if {st} > 0 else ({v} > {hi})", mode="eval").body
        for n in ast.walk(test):
            ast.copy_location(n, s)
        inc = ast.copy_location(ast.AugAssign(ast.Name(v, ast.Store()), ast.Add(), ast.Name(st, ast.Load())), s)
        return init, test, [ast.copy_location(inc, s.body[-1])]

    # -- which variables cross a barrier --

    def _units(self, parts=None):
        """Every region (stmts) and every loop or if test (an expression), in order."""
        for p in self.tree if parts is None else parts:
            if p[0] == "region":
                yield p[1]
            elif p[0] == "while":
                yield [p[1]]
                yield from self._units(p[2])
            elif p[0] == "if":
                yield [p[1]]
                yield from self._units(p[2])
                yield from self._units(p[3])

    def _classify(self):
        units = list(self._units())
        stored = set().union(*(_names(u, ast.Store) for u in units)) - set(self.params) - set(self.shared)
        seen = {}
        for i, u in enumerate(units):
            for n in _names(u) & stored:     # a name the kernel never assigns is a global or a builtin
                seen.setdefault(n, set()).add(i)
        self.expanded = sorted(n for n, where in seen.items() if len(where) > 1)
        for n in self.expanded:              # a local array alive across a barrier: one per thread, made per block
            if n in self.local_shapes:
                (shape, dt), decls = self.local_shapes[n]
                for d in decls:                  # the declaration takes this thread's row (a view, no copy)
                    d.value = ast.copy_location(ast.parse(f"{n}__t[tid__c]", mode="eval").body, d.value)

    def probe_types(self, types):
        """numba's types of the expanded variables, from the kernel compiled as one thread with no barriers."""
        import numba
        from numba.core import types as nt
        body = []
        for s in self._flatten(self.tree):
            body.append(s)
        args = [ast.arg(c) for c in _CTX + ("tx__c", "ty__c", "tz__c")] + [ast.arg(p) for p in self.params]
        fd = _fndef("probe__c", args, self._shared_allocs() + (body or [ast.Pass()]))
        ast.fix_missing_locations(ast.copy_location(fd, self.tree_anchor()))
        mod = ast.Module(self._device_defs() + [fd], [])
        ast.fix_missing_locations(mod)
        _sane(mod)
        ns = self.namespace()
        exec(compile(mod, self.py.__code__.co_filename, "exec"), ns)
        self._jit_devices(ns)
        disp = numba.njit(error_model="numpy")(ns["probe__c"])
        sig = (numba.int64,) * 10 + tuple(types)
        disp.compile(sig)
        cres = disp.overloads[disp.signatures[0]]
        found = {}
        for var, t in cres.type_annotation.typemap.items():
            base = var.split(".")[0]
            if base in self.expanded:
                found.setdefault(base, []).append(nt.unliteral(t))
        out = {}
        for name in self.expanded:
            ts = found.get(name)
            if not ts:
                raise Unsupported(f"the variable {name} (numba found no type for it)")
            t = cres.typing_context.unify_types(*ts)
            if name in self.local_shapes:
                continue                                 # an array: its shape and dtype are its declaration's
            if t is None or not isinstance(t, (nt.Number, nt.Boolean)):
                raise Unsupported(f"the variable {name} ({', '.join(map(str, ts))}) living across a barrier")
            out[name] = t
        return out

    def tree_anchor(self):
        for u in self._units():
            if u:
                return u[0]
        return ast.Pass(lineno=self.py.__code__.co_firstlineno, col_offset=0)

    def _flatten(self, parts):
        """The statements of the kernel with the barriers dropped (the probe: one thread, no barriers)."""
        out = []
        for p in parts:
            if p[0] == "region":
                out.extend(p[1])
            elif p[0] == "while":
                out.append(ast.copy_location(ast.While(p[1], self._flatten(p[2]) or [ast.Pass()], []), p[1]))
            elif p[0] == "if":
                out.append(ast.copy_location(ast.If(p[1], self._flatten(p[2]) or [ast.Pass()],
                                                    self._flatten(p[3])), p[1]))
        return out

    def _shared_allocs(self):
        """Shared arrays, and the per-thread rows of the local arrays alive across a barrier (for the probe)."""
        out = [ast.parse(f"{name} = np__c.empty({shape!r}, {dt})").body[0] for name, (shape, dt) in self.shared.items()]
        return out + [ast.parse(f"{n}__t = np__c.empty({(self.nthreads,) + shape!r}, {dt})").body[0]
                      for n, ((shape, dt), _) in self.local_shapes.items() if n in self.expanded]

    def _device_defs(self):
        return list(self.device_defs)

    def _jit_devices(self, ns):
        import numba
        for d in self.devices.values():
            ns[d] = numba.njit(boundscheck=True, error_model="numpy")(ns[d])

    def namespace(self, python=False):
        """The generated module's globals: the kernel's, its constants, numpy, the atomics and the helpers (`python`:
        as plain Python functions, for running a block again as Python)."""
        ns = dict(self.g)
        ns.update(self.consts)
        ns.update(np__c=np, math__c=math, poll__c=_poll, Stop__c=_Stop, ix__c=_ix if python else _IX[0], **{f"atomic_{op}__c": _ATOMIC_PY[op] for op in ATOMICS})
        return ns

    # -- code generation --


    def generate(self, typemap):
        """The module (an ast): device functions, a function per region that returns, and the launch: loops over
        the grid's blocks, in each a loop over the block's threads per region, loops and ifs over the tests."""
        self.unit_args = list(_CTX[1:]) + self.params + list(self.shared) + [f"{v}__t" for v in self.expanded]
        defs = self._device_defs()
        self.units = list(self._units())
        self.separate = {i for i, u in enumerate(self.units)
                         if not isinstance(u[0], ast.expr) and any(isinstance(n, ast.Return)
                                                                   for s in u for n in ast.walk(s))}
        for i in sorted(self.separate):
            defs.append(self._unit_fn(i, self.units[i]))
        params = "".join(f", {p}" for p in self.params)
        head = [f"def launch__c(gdx__c, gdy__c, gdz__c, at__c{params}):",
                "    for bz__c in range(at__c[2], at__c[5]):",
                "        for by__c in range(at__c[1], at__c[4]):",
                "            for bx__c in range(at__c[0], at__c[3]):"]
        ind = " " * 16
        head.append(f"{ind}at__c[6] = bx__c\n{ind}at__c[7] = by__c\n{ind}at__c[8] = bz__c")
        for name, (shape, dt) in self.shared.items():
            head.append(f"{ind}{name} = np__c.empty({shape!r}, {dt})")
        for v in self.expanded:
            if v in self.local_shapes:
                (shape, dt), _ = self.local_shapes[v]
                head.append(f"{ind}{v}__t = np__c.empty({(self.nthreads,) + shape!r}, {dt})")
                continue
            dt = self.const(np.dtype(str(typemap[v])).type)
            head.append(f"{ind}{v}__t = np__c.empty({self.nthreads}, {dt})")
        head.append(f"{ind}exited__c = np__c.zeros({self.nthreads}, np__c.uint8)")
        fn = ast.parse("\n".join(head + [f"{ind}pass", "    return 0"])).body[0]
        first = self.py.__code__.co_firstlineno
        for n in ast.walk(fn):
            if hasattr(n, "lineno"):
                n.lineno = n.end_lineno = first
        innermost = fn.body[0].body[0].body[0]
        innermost.body = innermost.body[:-1] + self._emit(self.tree, itertools.count())
        self.functions += [f"unit{i}__c" for i in sorted(self.separate)] + ["launch__c"]
        mod = ast.Module(defs + [fn], [])
        ast.fix_missing_locations(mod)
        return _sane(mod)

    def _loads_stores(self, stmts):
        """Statements that load a thread's slots of the variables these statements use, and store those they set."""
        used = _names(stmts) & set(self.expanded)
        stored = _names(stmts, ast.Store) & set(self.expanded)
        loads = [ast.parse(f"{v} = {v}__t[tid__c]").body[0] for v in sorted(used)]
        stores = [ast.parse(f"{v}__t[tid__c] = {v}").body[0] for v in sorted(stored) if v not in self.local_shapes]
        return loads, stores

    def _located(self, stmts, anchor):
        """Give generated statements the source position of `anchor` (errors point at the kernel's line)."""
        for s in stmts:
            for n in ast.walk(s):
                ast.copy_location(n, anchor)
        return stmts

    def _unit_fn(self, i, stmts):
        """A region's function of one thread (a region that returns): loads, the statements, stores."""
        loads, stores = self._loads_stores(stmts)
        anchor = stmts[0]
        body = list(loads)
        for s in stmts:
            r = _Returns(stores).visit(s)
            body.extend(r if isinstance(r, list) else [r])
        body += stores + [ast.Return(ast.Constant(RUNNING))]
        self._located(loads + stores + body[-1:], anchor)
        args = [ast.arg("tid__c")] + [ast.arg(a) for a in self.unit_args]
        return ast.copy_location(_fndef(f"unit{i}__c", args, self._thread_prologue(anchor) + body), anchor)

    def _thread_loop(self, inner, anchor):
        """for t__c in range(threads): if the thread has not returned: tid, tx, ty, tz, then `inner`."""
        loop = ast.parse(f"for tid__c in range({self.nthreads}):\n    if exited__c[tid__c] == 0:\n        pass").body[0]
        self._located([loop], anchor)   # before `inner` goes in: its statements keep their own lines
        loop.body[0].body = self._thread_prologue(anchor) + inner
        return loop

    def _emit(self, parts, counter):
        """Statements of the launch's block body for these parts."""
        out = []
        unit_args = ", ".join(self.unit_args)
        for p in parts:
            if p[0] == "barrier":
                continue
            i = next(counter)
            unit = self.units[i]
            anchor = unit[0]
            if p[0] == "region":
                if i in self.separate:
                    call = ast.parse(f"exited__c[tid__c] = unit{i}__c(tid__c, {unit_args})").body
                    out.append(self._thread_loop(self._located(call, anchor), anchor))
                else:
                    loads, stores = self._loads_stores(unit)
                    out.append(self._thread_loop(self._located(loads, anchor) + unit
                                                 + self._located(stores, anchor), anchor))
                continue
            agree = self._agree(i, unit[0])
            body = [self._emit(branch, counter) or [ast.Pass()] for branch in p[2:]]
            test = ast.parse(f"agreed{i}__c == 1", mode="eval").body
            if p[0] == "while":
                stop = ast.If(ast.UnaryOp(ast.Not(), test), [ast.Break()], [])
                node = ast.While(ast.Constant(True), agree + [stop] + body[0], [])
                out.append(node)
            else:
                out += agree + [ast.If(test, body[0], body[1] if body[1] != [ast.Pass()] else [])]
        return out

    def _agree(self, i, test):
        """Statements that evaluate a test for every live thread into agreed<i>__c, insisting that they agree."""
        loads, _ = self._loads_stores([test])
        where = (f"{self.py.__name__}: the threads of a block disagree on the condition of a loop or if that "
                 "holds a barrier (every thread must reach the same cuda.syncthreads())")
        check = ast.parse(f"c__c = 1 if (TEST) else 0\nif agreed{i}__c == -1:\n    agreed{i}__c = c__c\n"
                          f"elif c__c != agreed{i}__c:\n    raise RuntimeError({where!r})").body
        check[0].value.test = test
        init = ast.parse(f"agreed{i}__c = -1").body
        return self._located(init, test) + [self._thread_loop(self._located(loads, test)
                                                              + self._located(check, test), test)]

    def _thread_prologue(self, anchor):
        """tx, ty, tz of thread number tid__c in the block (x fastest, as CUDA numbers them)."""
        bx, by, _ = self.block
        src = f"tx__c = tid__c % {bx}\nty__c = (tid__c // {bx}) % {by}\ntz__c = tid__c // {bx * by}"
        return [ast.copy_location(s, anchor) for s in ast.parse(src).body]


class _Guard(ast.NodeTransformer):
    """Ticks in the generated module, counted in each function's local ticks__c: once in POLL_TICKS ticks, _poll
    says whether to stop. So a kernel that never ends (or a grid far too large) stops at the launch's deadline or at
    a Ctrl-C, which numba's compiled code cannot otherwise see. A `while` ticks every iteration (a spin never ends),
    a `for` once as it starts (its range bounds it; a tick in a matmul's inner loop cost a third of a training
    step), the loop over blocks once per thread of each block; the loops over threads do not tick."""

    def __init__(self, nthreads):
        self.nthreads = nthreads

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.body = self._located(ast.parse("ticks__c = 0").body, node) + node.body
        return node

    def visit_While(self, node):
        self.generic_visit(node)
        node.body = self._tick(1, node) + node.body
        return node

    def visit_For(self, node):
        self.generic_visit(node)
        target = getattr(node.target, "id", "")
        if target == "bx__c":
            node.body = self._tick(self.nthreads, node) + node.body
        elif target in ("tid__c", "by__c", "bz__c"):
            return node
        return self._tick(1, node) + [node]

    def _tick(self, weight, anchor):
        return self._located(ast.parse(f"ticks__c += {weight}\nif ticks__c >= {POLL_TICKS}:\n    ticks__c = 0\n"
                                       "    if poll__c() != 0:\n        raise Stop__c('stopped')").body, anchor)

    @staticmethod
    def _located(stmts, anchor):
        for st in stmts:
            for n in ast.walk(st):
                ast.copy_location(n, anchor)
        return stmts


class _Returns(ast.NodeTransformer):
    """`return` in a region: store the thread's variables, then say it exited."""

    def __init__(self, stores):
        self.stores = stores

    def visit_Return(self, node):
        if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            raise Unsupported("a kernel that returns a value", node)
        out = [ast.copy_location(ast.parse(ast.unparse(s)).body[0], node) for s in self.stores]
        for s in out:
            for n in ast.walk(s):
                ast.copy_location(n, node)
        return out + [ast.copy_location(ast.Return(ast.Constant(EXITED)), node)]

    def visit_FunctionDef(self, node):
        raise Unsupported("a function defined inside a kernel", node)


class _CudaRewriter(ast.NodeTransformer):
    """cuda.* -> loop variables, launch constants and helpers; device functions without barriers -> njit calls."""

    def __init__(self, kernel, in_device):
        self.k, self.in_device = kernel, in_device

    def _name(self, text, node):
        return ast.copy_location(ast.parse(text, mode="eval").body, node)

    def visit_Assign(self, node):
        v = node.value
        if isinstance(v, ast.Call) and _cuda_path(v.func, self.k.g) == ("shared", "array"):
            if self.in_device or len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                raise Unsupported("cuda.shared.array other than `name = cuda.shared.array(shape, dtype)` in a "
                                  "kernel", node)
            shape, dt = self._array_args(v)
            if shape == (0,) or 0 in shape:
                raise Unsupported("dynamic shared memory", node)
            name = node.targets[0].id
            if name in self.k.shared:
                raise Unsupported(f"two shared arrays named {name}", node)
            self.k.shared[name] = (shape, dt)
            return None
        if isinstance(v, ast.Call) and _cuda_path(v.func, self.k.g) == ("local", "array"):
            shape, dt = self._array_args(v)
            node.value = self._name(f"np__c.empty({shape!r}, {dt})", v)
            if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                if name in self.k.local_shapes and self.k.local_shapes[name][0][0] != shape:
                    raise Unsupported(f"two local arrays named {name}", node)
                self.k.local_shapes.setdefault(name, [(shape, dt), []])[1].append(node)
            return node
        return self.generic_visit(node)

    def _array_args(self, call):
        args = list(call.args) + [kw.value for kw in call.keywords if kw.arg in ("shape", "dtype")]
        if len(args) != 2:
            raise Unsupported("an array declaration other than (shape, dtype)", call)
        return self.k.shape_value(args[0]), self.k.dtype_name(args[1])

    def visit_Expr(self, node):
        path = _cuda_path(getattr(node.value, "func", None), self.k.g) if isinstance(node.value, ast.Call) else None
        if path == ("syncthreads",):
            if self.in_device:
                raise Unsupported("cuda.syncthreads() in a device function", node)
            node.value = self._name("syncthreads__c()", node.value)
            return node
        if path and path[0] in NO_OPS:
            return ast.copy_location(ast.Pass(), node)
        return self.generic_visit(node)

    def visit_Attribute(self, node):
        path = _cuda_path(node, self.k.g)
        if path is None:
            return self.generic_visit(node)
        bx, by, bz = self.k.block
        if len(path) == 2 and path[1] in AXES:
            axis = path[1]
            table = {"threadIdx": f"t{axis}__c", "blockIdx": f"b{axis}__c", "gridDim": f"gd{axis}__c",
                     "blockDim": str(dict(zip(AXES, self.k.block))[axis])}
            if path[0] in table:
                return self._name(table[path[0]], node)
        if path == ("warpsize",):
            return self._name(str(WARP), node)
        if path == ("laneid",):
            return self._name(f"(tid__c % {WARP})", node)
        raise Unsupported(f"cuda.{'.'.join(path)}", node)

    def visit_Call(self, node):
        path = _cuda_path(node.func, self.k.g)
        block = dict(zip(AXES, self.k.block))
        if path in (("grid",), ("gridsize",)):
            n = self._ndim(node)
            if path == ("grid",):
                parts = [f"(b{a}__c * {block[a]} + t{a}__c)" for a in AXES[:n]]
            else:
                parts = [f"(gd{a}__c * {block[a]})" for a in AXES[:n]]
            return self._name(parts[0] if n == 1 else "(" + ", ".join(parts) + ")", node)
        if path and path[0] == "atomic" and len(path) == 2:
            if path[1] not in ATOMICS or len(node.args) != 3:
                raise Unsupported(f"cuda.atomic.{path[1]}", node)
            node.func = self._name(f"atomic_{path[1]}__c", node.func)
            node.args = [self.visit(a) for a in node.args]
            return node
        if path is not None:
            raise Unsupported(f"cuda.{'.'.join(path)}()", node)
        dev = _device_fn(node.func, self.k.g)
        if dev is not None:
            name = self.k._device_njit(dev)
            node.func = ast.copy_location(ast.Name(name, ast.Load()), node.func)
            node.args = [ast.Name(c, ast.Load()) for c in _CTX] + [self.visit(a) for a in node.args]
            for a in node.args:
                ast.copy_location(a, node)
            return node
        return self.generic_visit(node)

    def _ndim(self, node):
        if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant) or node.args[0].value not in (1, 2, 3):
            raise Unsupported("cuda.grid(n) with n other than the constant 1, 2 or 3", node)
        return node.args[0].value

    def visit_FunctionDef(self, node):
        raise Unsupported("a function defined inside a kernel", node)

    def visit_Lambda(self, node):
        raise Unsupported("a lambda inside a kernel", node)

    def visit_Subscript(self, node):
        """a[i, j] -> a[ix__c(i), ix__c(j)]: a negative index is refused, not wrapped (slices, constants >= 0 stay)."""
        self.generic_visit(node)
        node.slice = self._checked(node.slice)
        return node

    def _checked(self, index):
        if isinstance(index, ast.Tuple):
            index.elts = [self._checked(e) for e in index.elts]
            return index
        if isinstance(index, ast.Slice) or (isinstance(index, ast.Constant) and isinstance(index.value, int)
                                            and index.value >= 0):
            return index
        return ast.copy_location(ast.Call(ast.copy_location(ast.Name("ix__c", ast.Load()), index), [index], []),
                                 index)


def _atomic(op):
    """A plain read-modify-write in place of cuda.atomic.<op>: returns the old value, as CUDA does."""
    import numba

    def add(a, i, v):
        old = a[i]
        a[i] = old + v
        return old

    def sub(a, i, v):
        old = a[i]
        a[i] = old - v
        return old

    def max_(a, i, v):
        old = a[i]
        if v > old:
            a[i] = v
        return old

    def min_(a, i, v):
        old = a[i]
        if v < old:
            a[i] = v
        return old

    def exch(a, i, v):
        old = a[i]
        a[i] = v
        return old

    fns = {"add": add, "sub": sub, "max": max_, "min": min_, "exch": exch}
    return numba.njit(boundscheck=True, error_model="numpy")(fns[op])


class _LazyIx(list):
    """[the njit version of _ix], compiled on first use."""

    def __getitem__(self, k):
        if not len(self):
            import numba
            self.append(numba.njit(error_model="numpy")(_ix_jit))
        return list.__getitem__(self, k)


def _ix_jit(i):
    if i < 0:
        raise IndexError("a negative index")
    return i


_IX = _LazyIx()


class _LazyAtomics(dict):
    def __missing__(self, op):
        self[op] = _atomic(op)
        return self[op]


_ATOMIC_PY = _LazyAtomics()
