"""Your kernels, your network: the student's saved solutions (course/runtime/solutions.py) used by the course.

`use_mine()` registers every solution that still stands (course/runtime/registry.py), where each place the course
runs an exercise's piece asks for it (`registry.pick("5.1", sgd_kernel)`), and prints whose code runs where;
`use_course()` clears the registry: the course's own run everywhere. No module's attribute is changed. A
solution edited after passing (the cell re-run, or the notebook saved, with a different source) or whose check
failed since is not used."""
import importlib
import importlib.util
import inspect
import json
import sys
from pathlib import Path

from course.runtime import registry
from course.runtime.solutions import (ALWAYS_COURSE, BUNDLE_PREFIX, CHECKS, STEP_PIECES, UPDATE,  # noqa: F401
    CaptureError, MARKER_RE, PIECES, disabled, load_record, mine_dir, normalize, read_record, step_pieces, trainer_keys,
    _note_once, _only_definitions, _paths, _py, _sha, _stem, _transform)  # (STEP_PIECES, UPDATE: the pieces' table)


# ---- which solutions stand, and putting them in place ----

def _student_notebooks(key, rec):
    """The notebook the record's pass came from (Jupyter names it), else the NN_*.ipynb notebooks of the folder it
    ran in (recorded: COURSE_MINE_DIR may be elsewhere), else those next to the mine folder."""
    named = rec.get("notebook")
    if named and Path(named).is_file():
        return [Path(named)]
    folder = Path(rec["notebook_dir"]) if rec.get("notebook_dir") else mine_dir().parent
    return sorted(folder.glob(f"{int(key.split('.')[0]):02d}_*.ipynb"))


def _edited_in_file(key, rec):
    """True if the student's notebook, saved after the pass, holds a different cell for this exercise."""
    if not rec.get("cell"):
        return False
    for path in _student_notebooks(key, rec):
        if path.stat().st_mtime <= rec.get("time", 0):
            continue
        try:
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError):  # not a notebook: not ours
            continue
        for i, c in enumerate(cells if isinstance(cells, list) else []):
            if not isinstance(c, dict):
                continue
            src = c.get("source", "")
            src = "".join(src) if isinstance(src, list) and all(isinstance(x, str) for x in src) else src
            if not isinstance(src, str):  # JSON, but not a notebook's cell: the student's file, so say so
                _note_once(f"course.runtime.mine: {path.name} cell {i}: its source is a {type(src).__name__}, not text: "
                           "skipped when looking for edits")
                continue
            if c.get("cell_type") == "code" and key in MARKER_RE.findall(src):
                return normalize(_transform(src)) != rec["cell"]
    return False


def _load(key, rec):
    path = _paths(key)[0]
    text = path.read_text(encoding="utf-8")
    if _sha(text) != rec.get("sha256"):
        raise CaptureError(f"{path.name} was changed after the check passed")
    _only_definitions(path, text)
    name = f"{BUNDLE_PREFIX}{_stem(key)}_{rec['sha256'][:12]}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return getattr(sys.modules[name], rec["name"])


def _target(key):
    modname, attr = PIECES[key][1].split(":")
    return importlib.import_module(modname), attr


def _nparams(fn):
    return len(inspect.signature(_py(fn)).parameters)


STATUS_WHY = {"failed": "check failed", "edited": "edited after passing"}  # any other status than "passed"


def _why_not(key, rec, records, _path=()):
    """Why a record cannot be used (a short reason), or None. Only a record that says "passed" counts."""
    if rec is None:
        return "never checked"
    if rec.get("status") != "passed":
        return STATUS_WHY.get(rec.get("status"), f"its record says {str(rec.get('status'))[:40]!r}, not passed")
    if rec.get("check") and rec["check"] != CHECKS.get(key, rec["check"]):
        return (f"saved by {rec['check']}, not {CHECKS[key]} (the exercises were renumbered since): run this "
                "exercise's check again")
    if _edited_in_file(key, rec):
        return "edited after passing"
    for fname, info in rec.get("functions", {}).items():
        dep = info.get("exercise")
        if dep and dep != key:
            if dep in _path:
                return f"uses {fname} of exercise {dep}, which uses this one back: run both checks again"
            drec = records.get(dep) if dep in records else read_record(dep)
            reason = _why_not(dep, drec, records, _path + (key,))
            if reason is not None:
                return f"uses {fname} of exercise {dep}: {reason}"
            if drec.get("functions", {}).get(fname, {}).get("sha256") != info.get("sha256"):
                return f"{fname} changed since this check passed: run it again"
    return None


def status(keys=None):
    """{exercise: (solution or None, reason)} for each piece: reason is "yours" or why the course's runs."""
    keys = list(PIECES) if keys is None else list(keys)
    loaded = {k: load_record(k) for k in PIECES}
    records = {k: rec for k, (rec, _) in loaded.items()}
    out = {}
    for key in keys:
        rec, problem = loaded[key]
        why = problem or _why_not(key, rec, records)
        fn = None
        if why is None:
            try:
                fn = _load(key, rec)
                module, attr = _target(key)
                if _nparams(fn) != _nparams(getattr(module, attr)):
                    fn, why = None, "its signature differs from the course's"
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # a file that no longer loads (SystemExit too): say so, run the course's
                fn, why = None, f"cannot load: {type(e).__name__}: {' '.join(str(e).split())[:160]}"
        out[key] = (fn, why or "yours")
    return out


def use_course():
    """The course's own kernels everywhere again: the registry emptied."""
    registry.clear()


def table(st, where=None):
    """The lines saying, per piece, whose code runs and why not the student's."""
    mine = [k for k, (fn, _) in st.items() if fn is not None]
    lines = [f"{len(mine)} of {len(st)} pieces run your code (saved in {where or mine_dir()}):",
             f"  {'ex':4s} {'piece':36s} whose"]
    for key, (fn, why) in st.items():
        lines.append(f"  {key:4s} {PIECES[key][0]:36s} " + ("yours" if fn is not None else f"course's: {why}"))
    return lines


def use_mine(keys=None, quiet=False, label="course.use_mine()"):
    """Run the student's passing solutions in place of the course's, wherever they stand; print whose code runs
    where. Call again after passing more checks (no restart needed). Returns status()."""
    use_course()
    st = status(keys)
    _LAST.clear()
    _LAST.update(st)
    for key, (fn, _) in st.items():
        if fn is not None:
            registry.register(key, fn)
    if not quiet:
        d = mine_dir()
        if disabled():
            print(f"{label}: COURSE_MINE_DIR=off: the course's kernels run everywhere")
        elif not any(load_record(k) != (None, None) for k in PIECES):
            print(f"{label}: no passing solutions of yours in {d} yet: the course's kernels run everywhere "
                  "(each check that passes in the student notebooks saves yours there)")
        else:
            lines = table(st, d)
            lines[0] = f"{label}: {lines[0]}"
            if keys is not None:
                lines.append(f"  always the course's: {ALWAYS_COURSE}")
            print("\n".join(lines))
    return st


_LAST = {}  # the status() of the last use_mine(), for report()


def report(keys=None, own=()):
    """Print whose code the last use_mine() put in place, for `keys` (default: every piece); return those lines.
    A piece whose check passed after that use_mine() says so: it runs once use_mine() is called again. `own`: pieces
    the notebook's own cells define and its loop calls (06's train_step, evaluate): the student's whatever was saved."""
    if not _LAST:
        lines = ["course.use_mine() was not called in this process: the course's own kernels ran everywhere"]
    else:
        shown = {k: _LAST[k] for k in (keys or _LAST) if k in _LAST}
        now = status([k for k, (fn, _) in shown.items() if fn is None])
        for k, (fn, _) in now.items():
            if fn is not None:
                shown[k] = (None, "passed since course.use_mine() ran: call it again")
        shown.update({k: (True, "yours") for k in own if k in shown})
        lines = table(shown)
        if keys is not None:  # the pieces of a run: what it ran that has no exercise, as use_mine(keys) says
            lines.append(f"  always the course's: {ALWAYS_COURSE}")
    print("\n".join(lines))
    return lines


def installed():
    """{exercise: the student's solution} registered now."""
    return registry.registered()


WHERE = {"gpu": "on the GPU", "cpu": "on the CPU executor (kernels compiled for the CPU by numba)",
         "sim": "in numba's CUDA simulator"}


def whose(keys, own=()):
    """Whose kernels run these pieces now: "your kernels", "the course's kernels", or yours where they passed.
    `own`: pieces the notebook's own cells define (as report's), the student's."""
    mine = [k for k in keys if k in installed() or k in own]
    if len(mine) == len(keys):
        return f"your kernels ({len(mine)} of {len(keys)} pieces yours)"
    if not mine:
        return "the course's kernels"
    return f"your kernels where they passed ({len(mine)} of {len(keys)} pieces yours, the others the course's)"


def trained(run, name, keys, own=(), accuracy=True):
    """One line that says what trained `run` (a history of notebook 06's fit, fit_sim or fit_ref): whose kernels,
    on which device, at which sizes, for how many of its steps; and its final test accuracy, unless `accuracy` is
    False (a shrunk run's, which means nothing). `own`: as report's."""
    setup, acc = run.get("setup", {}), run["epoch"][-1]["test_acc"]
    sizes = (f"{setup.get('n_in', '?')}-{setup.get('hidden', '?')}-10 on {setup.get('n_train', 0):,} images, "
             f"{len(run['epoch'])} epoch{'s' if len(run['epoch']) > 1 else ''} of batch {setup.get('batch_size')}")
    head = f"{name}: test accuracy {acc:.4f} ({sizes})" if accuracy else f"{name} ({sizes})"
    if run.get("device") == "numpy":
        k = run.get("kernel_steps", 0)
        kernels = (f"steps 1-{k} on {whose(keys, own)} {WHERE[run.get('kernel_device', 'sim')]}, checked equal to the "
                   "NumPy twin; the twin (fit_ref, NumPy on the host) trained the rest and made this accuracy") if k             else "trained by the NumPy twin (fit_ref, on the host), not by kernels"
        return f"{head}: {kernels}"
    yours = any(k in installed() or k in own for k in keys)
    rest = f", with the course's {ALWAYS_COURSE}" if yours else ""  # no exercise
    return f"{head}: every one of its {run.get('steps', '?')} steps on {whose(keys, own)} {WHERE[run['device']]}{rest}"
