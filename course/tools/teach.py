"""Teachers' tools: an nbgrader course directory made from the notebooks, and a student build of the course whose
package holds no reference solution.

    python -m course nbgrader-setup DIR [NOTEBOOK ...]   # DIR/nbgrader_config.py, DIR/source/NN_topic/NN_topic.ipynb
    python -m course student-build DIR                   # the course without its solutions, for a graded class
"""
import argparse
import re
import shutil
import sys
from pathlib import Path

from . import nbtools
from .cli import OneLineParser

CONFIG = nbtools.ROOT / "teachers" / "nbgrader_config.py"
STUDENT_HEADER = ("# STUDENT BUILD of {nb}, made by `python -m course student-build`: each exercise is a stub\n"
                  "# (`raise NotImplementedError`), to be written in the notebook; `course.use_mine()` then uses yours.\n")
STUDENT_FOOTER = ("\n\nfrom course.tools.teach import guard_stubs as _guard_stubs  # noqa: E402\n\n"
                  "_guard_stubs(globals())  # launching a stub kernel raises in Python, on a GPU too\n")
USE_MINE = "course.use_mine();  # student build: the course's exercise pieces are stubs; your passing solutions run"
STUDENT_README = """# GPU training from scratch: student build

The course's notebooks with the exercises to do, in `notebooks/exercises/`, and its `course` package, in which
every exercise is a stub: a later notebook that needs an earlier exercise's kernel raises
`NotImplementedError: Exercise N.M: ...` until you have written it and its check has passed.

    pip install -r requirements.txt && jupyter lab notebooks/exercises/
"""


ASSIGNMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a folder name under DIR/source, nothing more


def _usable_dest(dest):
    """DEST as a Path, or ValueError: a file, or inside the course's own notebooks or package (a copy of them would
    copy itself)."""
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"{dest} is a file, not a directory")
    where = dest.resolve()
    for inside in (nbtools.NOTEBOOKS, nbtools.PACKAGE):
        if where == inside.resolve() or inside.resolve() in where.parents:
            raise ValueError(f"{dest} is inside the course's {inside.name}/: choose a directory outside it")
    return dest


def _assignment(name):
    """An assignment name that stays a folder of DIR/source (no path, no '..'), or ValueError."""
    if name is not None and not ASSIGNMENT_RE.match(name):
        raise ValueError(f"--assignment {name!r}: a folder name (letters, digits, _ . -), not a path")
    return name


def nbgrader_setup(dest, notebooks=None, assignment=None, force=False):
    """An nbgrader course directory: DEST/nbgrader_config.py and DEST/source/NN_topic/NN_topic.ipynb per notebook
    (every solution notebook, or those named: a path, a file name or its NN prefix), or all of them in one
    DEST/source/ASSIGNMENT/; returns the notebooks written. An existing config is kept (`kept_config` says if it
    differs); a notebook in source/ that differs from the course's is refused (the teacher's edits), unless force."""
    dest, assignment = _usable_dest(dest), _assignment(assignment)
    every = nbtools.solution_notebooks()
    chosen = every if not notebooks else [_find(n, every) for n in notebooks]
    plan = [(nb, dest / "source" / (assignment or nb.stem) / nb.name) for nb in chosen]
    differ = [t for nb, t in plan if t.exists() and t.read_bytes() != nb.read_bytes()]
    if differ and not force:
        raise ValueError(f"{', '.join(str(t) for t in differ)} differ from the course's notebooks (your edits?): "
                         "nothing was written; --force replaces them")
    dest.mkdir(parents=True, exist_ok=True)
    config = dest / "nbgrader_config.py"
    if not config.exists():
        shutil.copyfile(CONFIG, config)
    out = []
    for nb, target in plan:
        if not target.exists() or target.read_bytes() != nb.read_bytes():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(nb, target)
            out.append(target)
    return out


def kept_config(dest):
    """A line saying DEST's own nbgrader_config.py was kept though it differs from the course's, or None."""
    config = Path(dest) / "nbgrader_config.py"
    if config.is_file() and config.read_bytes() != CONFIG.read_bytes():
        return (f"kept your {config} (it differs from the course's {CONFIG.relative_to(nbtools.ROOT)}: "
                "compare them; the course's sets COURSE_MINE_DIR=off and the exercise stubs)")
    return None


def _find(name, every):
    hits = [p for p in every if name in (str(p), p.name, p.stem, p.name[:2]) or Path(name).resolve() == p.resolve()]
    if len(hits) != 1:
        raise ValueError(f"no notebook {name!r}; choose from {', '.join(p.name for p in every)}")
    return hits[0]


def student_modules():
    """{module: source} of the notebooks' exported modules with every solution block replaced by its stub."""
    sources = nbtools.module_sources(nbtools.student_cell)   # a module may span consecutive notebooks
    return {module: STUDENT_HEADER.format(nb=" and ".join(f"notebooks/{name}" for name in owners)) + "\n"
            + "\n\n\n".join(parts) + "\n" + STUDENT_FOOTER for module, (owners, parts) in sources.items()}


def student_build(dest, hint_answers=True):
    """Write the course without its solutions into DEST (a new or empty directory): the package with stubbed
    exercises, the student notebooks, MNIST, requirements.txt and pyproject.toml. Returns DEST.
    hint_answers=False: the hints' last level (the answer's code, hint("N.M", level=...)) is taken out of the
    build's checks, and hint() says the teacher turned it off (without_hint_answers)."""
    dest = _usable_dest(dest)
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"{dest} is not empty")
    root = nbtools.ROOT
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(nbtools.PACKAGE, dest / "course", ignore=ignore)
    modules = student_modules()
    for path in (dest / "course").glob("*.py"):  # the reference modules, solutions included: replaced below
        if path.read_text(encoding="utf-8").startswith("# AUTOGENERATED"):
            path.unlink()
    for module, text in modules.items():
        (dest / "course" / f"{module}.py").write_text(text, encoding="utf-8")
    write_student_notebooks(dest / "notebooks" / "exercises")
    shutil.copytree(root / "data" / "mnist", dest / "data" / "mnist")
    for name in ("requirements.txt", "pyproject.toml"):
        shutil.copyfile(root / name, dest / name)
    (dest / "README.md").write_text(STUDENT_README, encoding="utf-8")
    if not hint_answers:
        without_hint_answers(dest / "course" / "checks")
    return dest


def write_student_notebooks(folder):
    """The student copies, made from the solution notebooks (never copied from notebooks/exercises/, where a
    student's pasted solutions or a duplicate may sit), with course.use_mine() in 02 on: the student's own kernels
    run from there."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in nbtools.solution_notebooks():
        nb = nbtools.student_copy(path)
        if (nbtools.PACKAGE / "runtime" / "mine.py").exists() and path.name[:2] >= "02":
            nb = with_use_mine(nb)
        (folder / path.name).write_text(nbtools.notebook_text(nbtools.stamp_written(nb, path.name)), encoding="utf-8")


ANSWER_RE = re.compile(r'more="""\\\n.*?"""', re.S)  # an @exercise's answer: the last level of its hints
NO_ANSWER = 'more="(not in this build)"'


def without_hint_answers(checks_dir):
    """Take the answers' code out of a build's checks (course/checks/*.py) and leave the marker file that makes
    hint() say the teacher turned the last level off; returns how many answers were removed."""
    from course.checks.core import NO_ANSWERS_FILE
    checks_dir = Path(checks_dir)
    removed = 0
    for path in sorted(checks_dir.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        new, n = ANSWER_RE.subn(NO_ANSWER, text)
        if n:
            path.write_text(new, encoding="utf-8")
            removed += n
    (checks_dir / Path(NO_ANSWERS_FILE).name).write_text(
        "The answers of the hints' last level were taken out of this build (student-build --no-hint-answers).\n",
        encoding="utf-8")
    return removed


CALLS_USE_MINE = re.compile(r"^[^#\n]*\buse_mine\(", re.M)   # a call, not a comment that names it


def with_use_mine(nb):
    """The notebook with `course.use_mine()` at the end of its first code cell, unless a cell already calls it: in
    the student build every earlier piece a notebook uses (02 loads MNIST with 1.1's parser) is the student's."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    if code and not any(CALLS_USE_MINE.search(nbtools.source(c)) for c in code):
        code[0]["source"] = nbtools.source(code[0]).rstrip("\n") + "\n" + USE_MINE
    return nb


def _stub_label(fn, seen=None):
    """The "Exercise N.M: title" of the stub that `fn` (a function, kernel or device function) is or calls; else None."""
    seen = set() if seen is None else seen
    py = getattr(fn, "py_func", fn)
    code = getattr(py, "__code__", None)
    if code is None or code in seen:
        return None
    seen.add(code)
    if "NotImplementedError" in code.co_names:
        label = next((c for c in code.co_consts if isinstance(c, str) and c.startswith("Exercise ")), None)
        if label:
            return label
    for name in code.co_names:  # device functions it calls
        callee = getattr(py, "__globals__", {}).get(name)
        if callee is not None and hasattr(callee, "py_func"):
            label = _stub_label(callee, seen)
            if label:
                return label
    return None


class Unsolved:
    """Stands in for a kernel that is (or calls) an exercise stub: launching it raises NotImplementedError in Python
    while it still reaches a stub, and launches the kernel once the stubs it calls are replaced (course.use_mine()).

    (On a GPU, a `raise` inside a kernel never reaches Python: the launch would silently leave garbage.)"""

    def __init__(self, kernel):
        self.kernel, self.py_func = kernel, kernel.py_func
        self.__name__ = getattr(kernel.py_func, "__name__", "kernel")

    def __getitem__(self, launch_config):
        label = _stub_label(self.kernel)
        if label:
            where = f"course.{self.py_func.__module__.split('.')[-1]}.{self.__name__}"
            raise NotImplementedError(f"{label} ({where} is a stub in this student build: solve the exercise, run "
                                      "its check, and call course.use_mine())")
        return self.kernel[launch_config]

    def __getattr__(self, name):  # anything else (e.g. compiling it) goes to the kernel
        return getattr(self.kernel, name)

    def __repr__(self):
        return f"<student-build guard of {self.__name__}: {_stub_label(self.kernel) or 'no stub left'}>"


def guard_stubs(namespace):
    """Replace each kernel of a student-build module that is or calls a stub with an Unsolved (called at import)."""
    from .compile import is_kernel
    for name, value in list(namespace.items()):
        if is_kernel(value) and getattr(value.py_func, "__module__", None) == namespace.get("__name__"):
            if _stub_label(value):
                namespace[name] = Unsolved(value)


def parser(cmd):
    """The parser of one teachers' command (each its own: argparse mixes options and notebooks only without
    subparsers)."""
    p = OneLineParser(prog=f"python -m course {cmd}", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    if cmd == "nbgrader-setup":
        p.add_argument("dir")
        p.add_argument("notebooks", nargs="*", help="default: every notebook; a name like 01 or 01_data.ipynb")
        p.add_argument("--assignment", help="one assignment of all these notebooks (default: one per notebook)")
        p.add_argument("--force", action="store_true", help="replace notebooks in DIR/source that differ from the "
                       "course's (an existing nbgrader_config.py is always kept)")
    else:
        p.add_argument("dir", help="a new or empty directory")
        p.add_argument("--no-hint-answers", action="store_true",
                       help="leave out the hints' last level, the answer's code (hint('N.M', level=...))")
    return p


def main(argv):
    """`python -m course nbgrader-setup ...` or `student-build ...`: 0, or 2 with one line on stderr."""
    cmd = argv[0] if argv else None
    if cmd not in ("nbgrader-setup", "student-build"):
        print("python -m course: error: choose nbgrader-setup or student-build", file=sys.stderr)
        return 2
    if not argv[1:]:  # parse_intermixed_args would also call the optional notebooks "required"
        print(f"python -m course {cmd}: error: give the directory DIR (python -m course {cmd} --help)",
              file=sys.stderr)
        return 2
    args = parser(cmd).parse_intermixed_args(argv[1:])  # `DIR --assignment X 01` as well as `DIR 01 --assignment X`
    try:
        if cmd == "nbgrader-setup":
            report_setup(args)
        else:
            print(f"wrote the student build in {student_build(args.dir, hint_answers=not args.no_hint_answers)}")
    except (ValueError, OSError) as e:  # OSError: a read-only or full DIR, a file where a folder goes
        why = f"{e.filename}: {e.strerror}" if isinstance(e, OSError) and e.strerror else str(e)
        print(f"python -m course {cmd}: error: {' '.join(why.split())[:400]}", file=sys.stderr)
        return 2
    return 0


def report_setup(args):
    """Run nbgrader-setup and say what it wrote, kept and what to do next."""
    paths = nbgrader_setup(args.dir, args.notebooks, args.assignment, force=args.force)
    for path in paths:
        print(f"wrote {path}")
    print(kept_config(args.dir) or f"{Path(args.dir) / 'nbgrader_config.py'}: the course's")
    every = nbtools.solution_notebooks()
    first = args.assignment or _find((args.notebooks or [every[0].name])[0], every).stem
    print(f"next: cd {args.dir} && nbgrader generate_assignment {first}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
