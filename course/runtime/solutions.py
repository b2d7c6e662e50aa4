"""Saving the student's passing solutions: what a check's pass records, below the checks (core.passed calls
`record`). The solution is saved with the helper functions and constants it uses from the notebook as
`mine/ex_N_M.py` (next to the student notebooks; `COURSE_MINE_DIR` moves it) with a JSON record: which check, when,
the SHA-256 of each function's source and the exercise cell. In a notebook, a hook marks a record edited (its cell
re-run with another source) or failed (its check failed since). course/runtime/mine.py decides what is used."""
import ast
import dis
import errno
import hashlib
import inspect
import json
import linecache
import os
import re
import sys
import tempfile
import textwrap
import time
import types
from datetime import datetime, timezone
from pathlib import Path

from course.runtime.util import in_notebook

PIECES = {  # exercise -> (piece, the course's object it replaces); only a same-signature solution replaces it
    "1.1": ("IDX header parser", "course.data:parse_idx_header"),
    "1.2": ("scale (uint8 -> float32)", "course.scale:scale_kernel"),
    "1.3": ("gather (minibatch rows)", "course.gather:gather_kernel"),
    "2.1": ("matmul v1 (naive)", "course.forward:matmul_v1_kernel"),
    "2.2": ("matmul v2 (tiled)", "course.forward:matmul_v2_kernel"),
    "2.3": ("linear layer (tiles + bias + ReLU)", "course.forward:linear_kernel"),
    "3.1": ("softmax + cross-entropy", "course.loss:softmax_xent_kernel"),
    "3.2": ("reduction (block sum)", "course.loss:sum_kernel"),
    "3.3": ("batch mean", "course.loss:batch_mean"),
    "4.1": ("gradient of the logits dZ2", "course.grad:dlogits_kernel"),
    "4.2": ("weight gradients dW = A^T dZ", "course.grad:matmul_tn_kernel"),
    "4.3": ("hidden gradient (ReLU mask)", "course.grad:dhidden_kernel"),
    "5.1": ("SGD update", "course.update:sgd_kernel"),
    "5.2": ("momentum update", "course.update:momentum_kernel"),
    "5.3": ("Adam update", "course.update:adam_kernel"),
    "6.1": ("training step", "course.train:train_step"),
    "6.2": ("evaluation", "course.train:evaluate"),
    "7.1": ("combine (landscape)", "course.landscape:combine_kernel"),
    "7.2": ("projection onto the plane", "course.landscape:project_to_plane"),
    "7.3": ("filter normalization", "course.landscape:filter_normalize"),
    "8.2": ("batch indices of a replayed graph", "course.graphs:batch_index_kernel"),
    "10.1": ("grid-stride SGD", "course.merged:sgd_gridstride_kernel"),
    "11.1": ("a block's tile of W1 (fused kernel)", "course.fused:tile_origin"),
    "12.1": ("reduce-scatter step (fused kernel)", "course.fused:halve"),
    "12.2": ("a warp's class sums (fused kernel)", "course.fused:warp_class_sums"),
    "13.1": ("a part's time (clock report)", "course.epoch:part_us"),
    "13.2": ("a grid barrier's time (clock report)", "course.epoch:barrier_us"),
    "15.1": ("matmul v3 (register-blocked)", "course.matmul:matmul_v3_kernel"),
}
UPDATE = {"sgd": "5.1", "momentum": "5.2", "adam": "5.3"}
CHECKS = {  # exercise -> the check whose pass saves it: a record another check saved (before a renumbering) is not it
    "1.1": "check_parse_idx_header", "1.2": "check_scale_kernel", "1.3": "check_gather_kernel",
    "2.1": "check_matmul_kernel", "2.2": "check_tiled_matmul", "2.3": "check_linear_kernel",
    "3.1": "check_softmax_xent_kernel", "3.2": "check_sum_kernel", "3.3": "check_batch_mean",
    "4.1": "check_dlogits_kernel", "4.2": "check_matmul_tn_kernel", "4.3": "check_dhidden_kernel",
    "5.1": "check_sgd_kernel", "5.2": "check_momentum_kernel", "5.3": "check_adam_kernel", "6.1": "check_train_step",
    "6.2": "check_evaluate", "7.1": "check_combine_kernel", "7.2": "check_project_to_plane",
    "7.3": "check_filter_normalize", "8.2": "check_batch_index",
    "10.1": "check_sgd_gridstride", "11.1": "check_tile_origin", "12.1": "check_halve",
    "12.2": "check_warp_class_sums", "13.1": "check_part_us", "13.2": "check_barrier_us", "15.1": "check_matmul_v3",
}
STEP_PIECES = ("1.3", "2.3", "3.1", "3.2", "3.3", "4.1", "4.2", "4.3")  # what notebook 06's step runs, the update aside


def step_pieces(optimizer="sgd"):
    """The exercises whose kernels a training step of notebook 06 (fit) runs with this optimizer."""
    return STEP_PIECES + (UPDATE[optimizer],)
ALWAYS_COURSE = "gather of the labels, column sums (db), count_correct, zero and divide"  # no exercise for these
MARKER_RE = re.compile(r"^\s*#\s*Exercise (\d+\.\d+)\b", re.M)
BEGIN = "### BEGIN SOLUTION"  # a cell with it is the course's reference solution, never the student's
BUNDLE_PREFIX = "course_mine_"
EXERCISES = Path(__file__).resolve().parents[2] / "notebooks" / "exercises"  # the student copies, in a checkout


def disabled():
    """COURSE_MINE_DIR=off: nothing is saved or used (e.g. while a teacher autogrades submissions)."""
    return os.environ.get("COURSE_MINE_DIR", "").lower() == "off"


def mine_dir():
    """Where passing solutions are saved: $COURSE_MINE_DIR; in a notebook, `mine/` in the notebook's own folder (a
    Jupyter kernel runs there: a submission's folder holds its own, never a classmate's); elsewhere
    notebooks/exercises/mine in a checkout of the course, else ~/.course/mine."""
    if os.environ.get("COURSE_MINE_DIR"):
        return Path(os.environ["COURSE_MINE_DIR"])
    if in_notebook():
        return Path.cwd() / "mine"
    return EXERCISES / "mine" if EXERCISES.is_dir() else Path.home() / ".course" / "mine"


def trainer_keys(optimizer="sgd"):
    """The exercises whose solutions `python -m course train` runs (its update kernel is the optimizer's)."""
    return ["1.1", "1.3", "2.3", "3.1", "3.2", "3.3", "4.1", "4.2", "4.3", UPDATE[optimizer], "6.1", "6.2"]


def _key(exercise):
    m = re.search(r"(\d+\.\d+)", str(exercise))
    if not m:
        raise ValueError(f"not an exercise number: {exercise!r}")
    return m.group(1)


def _stem(key):
    return "ex_" + key.replace(".", "_")


def _sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def normalize(src):
    """Source text compared for edits: trailing spaces and blank lines at either end do not count."""
    return "\n".join(line.rstrip() for line in src.splitlines()).strip("\n") + "\n"


def _transform(src):
    """A notebook cell as IPython compiles it (what linecache holds), for comparing a saved cell with a run one."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        return TransformerManager().transform_cell(src)
    except Exception:  # no IPython, or a cell it cannot parse: compare the raw text
        return src


# ---- capturing a solution: its source, and the notebook's functions and constants it uses ----

class CaptureError(ValueError):
    """A solution uses something from the notebook that cannot be written into a file."""


def _py(fn):
    return getattr(fn, "py_func", fn)


def _globals_read(code):
    """Global names the code (and code nested in it) reads."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _globals_read(c)
    return names


def _source(py):
    return textwrap.dedent(inspect.getsource(py))


def _def_names(src):
    """Global names the def statement itself evaluates: decorators and default values."""
    node = ast.parse(src).body[0]
    if not isinstance(node, ast.FunctionDef):
        raise CaptureError("its source is not a `def` statement: write it as a def at the top level of its cell")
    exprs = list(node.decorator_list) + list(node.args.defaults) + [d for d in node.args.kw_defaults if d]
    return {n.id for e in exprs for n in ast.walk(e) if isinstance(n, ast.Name)}


def _import_line(name, value):
    """`from module import attr as name` for an object some loaded module holds, or None."""
    own = getattr(_py(value), "__module__", None)  # a GPU dispatcher's own __module__ is numba's: ask its py_func
    for modname in (own, getattr(value, "__module__", None), "numba", "numba.cuda", "numpy", "math"):
        mod = sys.modules.get(modname) if isinstance(modname, str) else None
        if mod is None or modname.startswith(BUNDLE_PREFIX) or modname == "__main__":
            continue
        if getattr(mod, name, None) is value:
            return f"from {modname} import {name}"
        for attr, v in list(vars(mod).items()):
            if v is value and not attr.startswith("_"):
                return f"from {modname} import {attr} as {name}"
    return None


def _literal(value):
    try:
        return ast.literal_eval(repr(value)) == value and type(ast.literal_eval(repr(value))) is type(value)
    except Exception:
        return False


def _exercise_of(py):
    """The exercise whose cell (the nearest `# Exercise N.M` above the def) holds this function, or None."""
    lines = linecache.getlines(py.__code__.co_filename)
    first = py.__code__.co_firstlineno
    for line in reversed(lines[:first]):
        m = MARKER_RE.match(line)
        if m:
            return m.group(1)
    return None


def capture(fn):
    """(module source, {function name: (sha256, exercise)}): fn and every notebook function it calls, as source,
    after the imports and constants they read. Raises CaptureError for a global it cannot write down."""
    root = _py(fn)
    home = root.__globals__
    header, consts, funcs, seen, bound = [], [], [], set(), {}

    def bind(name, what):
        """Each name the file defines has one meaning: two values of `K` would leave only the last one."""
        if bound.setdefault(name, what) != what:
            raise CaptureError(f"two functions it uses see different `{name}` ({bound[name]} and {what}): give "
                               "them one definition, or different names")

    def visit(obj):
        py = _py(obj)
        if py.__code__ in seen:
            return
        seen.add(py.__code__)
        faithful(py)
        src = _source(py)
        bind(py.__name__, f"def at line {py.__code__.co_firstlineno} of {py.__code__.co_filename}")
        for name in sorted(_globals_read(py.__code__) | _def_names(src)):
            if name not in py.__globals__:
                continue  # a builtin, or not defined (the check would have failed)
            value = py.__globals__[name]
            inner = _py(value)
            if isinstance(value, types.ModuleType):
                line = f"import {value.__name__}" + ("" if value.__name__ == name else f" as {name}")
                bind(name, line)
                header.append(line)
            elif isinstance(inner, types.FunctionType) and (
                    inner.__globals__ is home or inner.__module__ == "__main__"
                    or str(inner.__module__).startswith(BUNDLE_PREFIX)):
                if inner.__name__ != name:
                    raise CaptureError(f"`{name}` is another name for `{inner.__name__}`: call it by its own name")
                visit(value)
            elif _literal(value):
                bind(name, f"{name} = {value!r}")
                consts.append(f"{name} = {value!r}")
            elif type(value).__module__ == "numpy" and getattr(value, "shape", None) == ():  # np.float32(0.5)
                header.append("import numpy")
                bind(name, f"{name} = numpy.{type(value).__name__}({value.item()!r})")
                consts.append(bound[name])
            else:
                line = _import_line(name, value)
                if line is None:
                    raise CaptureError(f"it uses `{name}` ({type(value).__name__}) from the notebook, which cannot "
                                       "be saved: define it inside the function, or as a number")
                bind(name, line)
                header.append(line)
        funcs.append((py.__name__, src, _exercise_of(py)))

    visit(fn)
    text = "\n".join(sorted(set(header), key=lambda s: (s.startswith("from"), s)))
    text += "\n\n" + "\n".join(dict.fromkeys(consts)) + "\n\n\n" if consts else "\n\n\n"
    text += "\n\n".join(src.rstrip() + "\n" for _, src, _ in funcs)
    return text, {name: dict(sha256=_sha(normalize(src)), exercise=ex) for name, src, ex in funcs}


def faithful(py):
    """Raise CaptureError for a function whose source alone does not say what it does: a lambda, a closure."""
    if py.__name__ == "<lambda>":
        raise CaptureError("it is a lambda: write it as a `def` (a lambda's line is not a definition to save)")
    if py.__code__.co_freevars:
        names = ", ".join(f"`{n}`" for n in py.__code__.co_freevars)
        raise CaptureError(f"it is a closure: it uses {names} of the function that made it, which its source does "
                           "not hold: define it at the top level of the cell, with those values as globals")


def _cell_of(py):
    """The whole notebook cell that defined py, normalized, or None for a function from a .py file. IPython keeps
    each cell in linecache with no modification time (a file read from disk has one)."""
    entry = linecache.cache.get(py.__code__.co_filename)
    if not entry or len(entry) != 4 or entry[1] is not None:
        return None
    return normalize("".join(entry[2]))


# ---- the records ----

def _paths(key):
    d = mine_dir()
    return d / f"{_stem(key)}.py", d / f"{_stem(key)}.json"


RECORD_TYPES = dict(exercise=str, name=str, status=str, time=(int, float), sha256=str, functions=dict,
                    check=(str, type(None)), cell=(str, type(None)), notebook=(str, type(None)),
                    notebook_dir=(str, type(None)))  # what record() writes (function: dict)
FUNCTION_TYPES = dict(sha256=str, exercise=(str, type(None)))


class RecordError(ValueError):
    """A record that cannot be read or is not what record() writes."""


def _checked(rec):
    """rec if it has the shape record() writes, else RecordError saying what is wrong."""
    if not isinstance(rec, dict):
        raise RecordError(f"a JSON {type(rec).__name__}, not a record")
    for field, kinds in RECORD_TYPES.items():
        if field in rec and not isinstance(rec[field], kinds) or isinstance(rec.get(field), bool):
            raise RecordError(f"`{field}` is a {type(rec[field]).__name__}")
    for name, info in rec.get("functions", {}).items():
        if not isinstance(info, dict) or any(not isinstance(info.get(f), k) for f, k in FUNCTION_TYPES.items()):
            raise RecordError(f"`functions.{name}` is not {{sha256, exercise}}")
    missing = [f for f in ("name", "sha256", "functions", "time") if f not in rec]
    if rec.get("status") == "passed" and missing:
        raise RecordError(f"a passed record without `{missing[0]}`")
    return rec


def load_record(key):
    """(the JSON record of exercise `key`, None) or (None, why it cannot be read); (None, None) when there is none."""
    if disabled():
        return None, None
    path = _paths(key)[1]
    try:
        return _checked(json.loads(path.read_text(encoding="utf-8"))), None
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, RecursionError) as e:  # RecordError, bad JSON, '[' * 200000, not UTF-8
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e) or type(e).__name__
        return None, f"cannot read {path.name}: {' '.join(why.split())[:120]}"


def read_record(key):
    """The JSON record of exercise `key` ("2.3"), or None (none, or one that cannot be read)."""
    return load_record(key)[0]


def _write(path, text):
    """Write text to path atomically, through a new temporary file beside it (never a name planted in advance);
    OSError for a path that is a symbolic link (a file course.runtime.mine did not write)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        raise OSError(errno.ELOOP, f"{path.name} is a symbolic link, which course.runtime.mine does not write through")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # O_EXCL, mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, path)  # atomic: another notebook's kernel never reads half a file
    finally:
        if os.path.lexists(tmp):  # a full disk: no half-written .tmp left behind
            os.unlink(tmp)


def _write_record(key, rec):
    _write(_paths(key)[1], json.dumps(rec, indent=1) + "\n")


def _calling_check():
    f = sys._getframe(1)
    while f is not None and not f.f_code.co_name.startswith("check_"):
        f = f.f_back
    return f.f_code.co_name if f is not None else None


def _not_saved(why):
    print(f"  (not saved for course.use_mine(): {' '.join(str(why).split())[:300]})")


def record(exercise, solution, check=None, quiet=False):
    """Save a solution whose check just passed (the checks call this); return the file, or None when it is not a
    student's notebook cell (the course's code, a solution notebook's cell, a test's file) or cannot be saved (then
    say why, in one line: the pass stands)."""
    key = _key(exercise)
    check = check or _calling_check()
    py = _py(solution)
    if disabled():
        return None
    if not isinstance(py, types.FunctionType):
        if not isinstance(py, type):  # a functools.partial, a callable object: nothing a file can hold
            _not_saved(f"it is a {type(py).__name__}, not a function: write it as a `def`")
        return None
    cell = _cell_of(py)
    if cell is None or BEGIN in cell:  # not typed in a notebook cell (tests, scripts), or the course's solution
        return None
    try:
        text, functions = capture(solution)
        _only_definitions(_paths(key)[0], text)  # what use_mine() would refuse to load: said now, not saved
    except (CaptureError, OSError, TypeError, SyntaxError) as e:
        _not_saved(e)
        return None
    try:
        module = _save(key, exercise, py, check, text, functions, cell)
    except OSError as e:  # read-only or full, a file in the way, another user's folder: the pass stands
        _not_saved(f"cannot write to {mine_dir()}: {e.strerror or e}")
        return None
    if not quiet:
        print(f"  saved for course.use_mine(): {module}")
    return module


def _save(key, exercise, py, check, text, functions, cell):
    """Write mine/ex_N_M.py and its record; return the module's path."""
    now = time.time()
    stamp = datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds")
    text = (f"# {exercise}: your solution, saved by course.runtime.solutions when {check or 'its check'} passed ({stamp}).\n"
            "# course.use_mine() and `python -m course train --mine` run it. Edit the notebook, not this file.\n"
            + text)
    module = _paths(key)[0]
    d = mine_dir()
    _write(module, text)
    if not (d / "__init__.py").exists():
        _write(d / "__init__.py", '"""Your passing solutions (course.runtime.mine): one module per exercise."""\n')
    _write_record(key, dict(exercise=key, name=py.__name__, check=check, status="passed", time=now,
                            passed_at=stamp, sha256=_sha(text), functions=functions, cell=cell,
                            notebook=_notebook_file(), notebook_dir=str(Path.cwd()) if in_notebook() else None))
    return module


def _mark(key, status):
    if disabled():
        return
    rec = read_record(key) or dict(exercise=key, functions={}, time=time.time())
    if rec.get("status") != status:
        rec["status"] = status
        _write_record(key, rec)


def mark_failed(exercise):
    """The check of `exercise` failed: its saved solution (if any) is not used until the check passes again."""
    _mark(_key(exercise), "failed")


def mark_edited(exercise):
    """The solution of `exercise` was changed after it passed: not used until its check passes again."""
    _mark(_key(exercise), "edited")


# ---- noticing edits and failures in a running notebook ----

def _after_cell(result):
    """IPython's post_run_cell hook: an exercise cell re-run with a new source, or a failed check, is noted."""
    info = getattr(result, "info", None)
    raw = getattr(info, "raw_cell", None) or ""
    if BEGIN in raw:
        return
    try:
        for key in MARKER_RE.findall(raw):
            rec = read_record(key)
            if rec and rec.get("status") == "passed" and rec.get("cell") and normalize(_transform(raw)) != rec["cell"]:
                mark_edited(key)
        err = getattr(result, "error_in_exec", None)
        if type(err).__name__ == "CheckFailure":
            m = re.match(r"\s*Exercise (\d+\.\d+) failed", str(err))
            if m:
                mark_failed(m.group(1))
    except OSError as e:
        print(f"course.runtime.mine: could not update {mine_dir()}: {e}", file=sys.stderr)


def watch(shell=None):
    """Register the hook in this IPython shell (done on import in a notebook); no-op outside IPython."""
    if shell is None:
        try:
            from IPython import get_ipython
            shell = get_ipython()
        except ImportError:
            return
    if shell is not None and _after_cell not in shell.events.callbacks["post_run_cell"]:
        shell.events.register("post_run_cell", _after_cell)


# ---- what a saved file may hold: definitions only (checked when saved, and again when used) ----

_NOTED = set()


def _note_once(line):
    """Print a one-line note the first time it comes up in this process."""
    if line not in _NOTED:
        _NOTED.add(line)
        print(line)


SAVED_STATEMENTS = (ast.Import, ast.ImportFrom, ast.Assign, ast.FunctionDef)  # all that record() writes


JIT_DECORATORS = ("numba.cuda.jit", "numba.jit", "numba.njit")  # the only code a saved def may run when defined


def _only_definitions(path, text):
    """Raise CaptureError unless the file holds only what record() writes: imports, constants, defs (so that
    importing it cannot print, exit or loop: a statement of any other kind, or a call outside a def, is refused;
    a def's decorators must be numba's jit, its defaults and annotations names or constants)."""
    tree = ast.parse(text, filename=str(path))
    imported = _imported_names(tree)
    for node in tree.body:
        ok = isinstance(node, SAVED_STATEMENTS) or isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if isinstance(node, ast.Assign):  # NAME = literal, or NAME = numpy.float32(literal)
            v = node.value
            ok = isinstance(v, ast.Constant) or isinstance(v, ast.Call) and _numpy_scalar(v)
            ok = (ok or _is_literal(v)) and all(isinstance(t, ast.Name) for t in node.targets)
        if not ok:
            raise CaptureError(f"{path.name} line {node.lineno} is not what course.runtime.solutions saves (a "
                               f"{type(node).__name__}): edit the notebook, not this file")
        if isinstance(node, ast.FunctionDef):
            _plain_def(path, node, imported)


def _imported_names(tree):
    """{name the file binds by an import: the dotted name it stands for}."""
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(node):
    """"a.b.c" for a name or a chain of attributes of one, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _plain_def(path, node, imported):
    """Raise CaptureError for a def that would run code when defined: a decorator other than numba's jit (with
    constant arguments), a default value or an annotation other than a name or a constant."""
    where = f"{path.name} line {node.lineno} ({node.name})"
    for d in node.decorator_list:
        call = d if isinstance(d, ast.Call) else None
        name = _dotted(call.func if call else d)
        head, _, rest = (name or "").partition(".")
        full = ".".join(filter(None, [imported.get(head, head), rest]))
        constant_args = call is None or all(_is_literal(a) for a in call.args) and all(
            k.arg and _is_literal(k.value) for k in call.keywords)
        if full not in JIT_DECORATORS or not constant_args:
            raise CaptureError(f"{where}: its decorator `{ast.unparse(d)[:60]}` is not numba's jit with constant "
                               "arguments, and course.runtime.mine runs nothing else when it loads a solution")
    a = node.args
    values = [*a.defaults, *filter(None, a.kw_defaults), node.returns,
              *[arg.annotation for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if arg]]
    for v in filter(None, values):
        if not (_is_literal(v) or _dotted(v)):
            raise CaptureError(f"{where}: `{ast.unparse(v)[:60]}` (a default value or an annotation) is not a name "
                               "or a constant, and course.runtime.mine runs nothing else when it loads a solution: compute "
                               "it inside the function")


def _numpy_scalar(call):
    f = call.func
    return (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "numpy"
            and len(call.args) == 1 and not call.keywords and _is_literal(call.args[0]))


def _is_literal(node):
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _notebook_file():
    """The running notebook's file, where Jupyter says it (JPY_SESSION_NAME, jupyter_server 2), else None."""
    name = os.environ.get("JPY_SESSION_NAME", "") if in_notebook() else ""
    return str(Path(name).resolve()) if name.endswith(".ipynb") and Path(name).is_file() else None


watch()
