"""The versions the course was tested with, and a one-line problem for each installed one outside them.

The toolchain is frozen (numba-cuda 0.30.4 is its last release), so these ranges are permanent: they match
requirements.txt (tests/test_requirements.py keeps the two in step) and pyproject.toml's requires-python. Read
without importing numba (importlib.metadata), so `import course` can say what is wrong before numba fails."""
import importlib.metadata
import platform
import sys

PYTHON = ((3, 10), (3, 14))        # oldest and newest CPython that numba-cuda 0.30.4 has wheels for
PYTHON_INTEL_MAC = (3, 13)         # numba has no macOS x86_64 wheels for newer ones
RANGES = {  # name: ((lowest, first excluded), why outside is a problem)
    "numba": (((0, 61), (0, 69)), "0.68 is the newest CI has run"),
    "numpy": (((2, 0), (2, 5)), "numba-cuda 0.30.4 fails at its first GPU compile with numpy 2.5 (np.row_stack)"),
}
PACKAGES = ("numba", "numba-cuda", "numpy", "llvmlite")


def version_tuple(text):
    """(major, minor) of a version string such as "0.68.1" or "2.1.3rc1" (packaging comes with numba-cuda)."""
    from packaging.version import Version
    return (Version(text).release + (0,))[:2]


def installed(name):
    """The installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def newest_python(machine=None, system=None):
    """The newest supported Python (major, minor) on this machine: 3.13 on an Intel Mac, else 3.14."""
    machine, system = machine or platform.machine(), system or platform.system()
    return PYTHON_INTEL_MAC if (system, machine) == ("Darwin", "x86_64") else PYTHON[1]


def python_problem(version=None, newest=None):
    """A line saying why this Python is unsupported, or None."""
    version, newest = tuple(version or sys.version_info[:2]), newest or newest_python()
    if PYTHON[0] <= version <= newest:
        return None
    return (f"Python {version[0]}.{version[1]} is not supported: the course runs on Python "
            f"{PYTHON[0][0]}.{PYTHON[0][1]} to {newest[0]}.{newest[1]} (numba and numba-cuda have no "
            f"wheels for others); make a virtual environment with one of those and pip install -r requirements.txt there")


def requirement(name):
    """The pip requirement of the tested range, e.g. "numba>=0.61,<0.69"."""
    (low, high), _ = RANGES[name]
    return f"{name}>={low[0]}.{low[1]},<{high[0]}.{high[1]}"


def range_problem(name, version):
    """A line saying that `version` of `name` is outside its tested range and how to fix it, or None (also when
    it is not installed)."""
    if version is None:
        return None
    (low, high), why = RANGES[name]
    if low <= version_tuple(version) < high:
        return None
    return f'{name} {version} is outside {requirement(name)} ({why}): pip install "{requirement(name)}"'


def problems(versions=None, python=None, newest=None):
    """Lines, one per problem, for this Python and the installed numba and numpy (or `versions`, {name: str})."""
    versions = versions if versions is not None else {p: installed(p) for p in PACKAGES}
    found = [python_problem(python, newest), *(range_problem(n, versions.get(n)) for n in RANGES)]
    return [p for p in found if p]


def fatal(simulator, versions=None):
    """The problem that stops every kernel (numpy >= 2.5 on a GPU: the compiler fails), or None."""
    if simulator:
        return None
    versions = versions if versions is not None else {"numpy": installed("numpy")}
    return range_problem("numpy", versions.get("numpy")) if versions.get("numpy") and \
        version_tuple(versions["numpy"]) >= RANGES["numpy"][0][1] else None


def warn_at_import():
    """Print each problem as one line on stderr (`import course`): a warning, not an error (see __init__.py)."""
    for line in problems():
        print(f"course: warning: {line}", file=sys.stderr)
