"""A simulated student, for the tests and scripts/mine_gpu.sh: the solution notebooks' exercise cells typed in and
run as notebook cells, each followed by its check (whose pass course.runtime.solutions saves)."""
import ast
import importlib
import linecache
import pkgutil
from pathlib import Path

import course.checks
from course.tools import nbtools


def run_cell(ns, src, name):
    """Run `src` in namespace ns as a notebook cell would (its source in linecache, as IPython does)."""
    src = src if src.endswith("\n") else src + "\n"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    exec(compile(src, name, "exec"), ns)


def _only_imports(src):
    """True for a cell of import statements only."""
    try:
        body = ast.parse(src).body
    except SyntaxError:
        return False
    return bool(body) and all(isinstance(node, (ast.Import, ast.ImportFrom)) for node in body)


def simulate_student(notebooks=None):
    """Do the exercises of the given notebooks (default: all) as a student would: in one namespace per notebook,
    run the notebook's exported cells with the solutions typed in, and the check cell after each exercise cell.
    Returns {notebook name: namespace}."""
    checks = {}
    for m in pkgutil.iter_modules(course.checks.__path__):
        mod = importlib.import_module(f"course.checks.{m.name}")
        checks.update({k: v for k, v in vars(mod).items() if k.startswith("check_")})
    out = {}
    for path in notebooks or nbtools.solution_notebooks():
        path = Path(path)
        cells = [c for c in nbtools.read(path)["cells"] if c["cell_type"] == "code"]
        ns = {"__name__": "__main__", **checks}
        for i, cell in enumerate(cells):
            src = nbtools.source(cell)
            if (nbtools.BEGIN not in src and not any(d == "export" for d, _ in nbtools.directives(src))
                    and not _only_imports(src)):   # a notebook's imports (12 takes 11's half of course.fused)
                continue
            code = nbtools._strip(src)  # the student's cell, their solution typed in (no markers)
            run_cell(ns, code, f"<{path.stem} cell {i}>")
            if nbtools.BEGIN in src:  # an exercise: its check is the next cell
                run_cell(ns, nbtools.source(cells[i + 1]), f"<{path.stem} cell {i + 1}>")
        out[path.name] = ns
    return out
