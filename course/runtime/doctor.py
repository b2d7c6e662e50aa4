"""`python -m course doctor`: what this machine runs the course with, and one line with its fix for each problem.

Checks, in order: Python and the numba, numba-cuda, numpy and llvmlite versions against the tested ones
(course/runtime/versions.py); GPU or simulator, and why; on a GPU the driver and the CUDA version it supports, the GPU's
compute capability, SMs and shared memory, nvJitLink, and whether the driver takes what numba-cuda builds (a tiny
kernel compiled, loaded and run: CUDA_ERROR_UNSUPPORTED_PTX_VERSION caught). Exit code 0 when all is well, else 1.
Every probe is a small function of this module, so the tests fake versions, drivers and GPUs with monkeypatch."""
import importlib
import os
import sys
from pathlib import Path

from course.runtime import device, versions

OK, NOTE, PROBLEM = "ok", "note", "PROBLEM"
OLDEST_DRIVER_CUDA = (12, 0)      # the CUDA 12 wheels (numba-cuda[cu12]) need a driver for CUDA 12.0+: 525 or newer
TESTED_CC = ((7, 5), (9, 0))      # T4 (sm_75) to H200 (sm_90): the compile test's targets
PTX_ISA = {(12, 0): (8, 0), (12, 1): (8, 1), (12, 2): (8, 2), (12, 3): (8, 3), (12, 4): (8, 4), (12, 5): (8, 5),
           (12, 6): (8, 5), (12, 8): (8, 7), (12, 9): (8, 8), (13, 0): (9, 0), (13, 1): (9, 1)}  # CUDA -> PTX ISA
NVVM_PACKAGES = ("nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc", "nvidia-nvvm")   # where numba-cuda's NVVM comes from
NVIDIA_PCI_VENDOR = "0x10de"
DISPLAY_CLASS = "0x03"            # PCI class of VGA and 3D controllers
COLAB_HINT = "on Colab: Runtime > Change runtime type > T4 GPU, then run the first cell again"
DRIVER_FIX = "install or update the NVIDIA driver (525 or newer: https://www.nvidia.com/drivers)"


def package_versions():
    """{distribution: version or None} of Python and the packages the course is tested with."""
    found = {p: versions.installed(p) for p in versions.PACKAGES}
    return {"python": "%d.%d.%d" % sys.version_info[:3], **found}


MODULES = {"numba": "numba", "numba-cuda": "numba_cuda", "numpy": "numpy", "llvmlite": "llvmlite"}  # what imports


def imported_modules():
    """{distribution: (the imported module's __version__, its folder, the import's error, the installed
    distribution's folder for it)}: what Python imports, which a file or folder of that name can shadow."""
    return {name: module_origin(name) for name in versions.PACKAGES}


def module_origin(name):
    """(version, folder, error, installed folder) of one distribution's module, as imported here."""
    module = MODULES[name]
    try:
        installed = Path(importlib.metadata.distribution(name).locate_file(module)).resolve()
        installed = str(installed) if installed.exists() else None  # an editable install's code is elsewhere
    except importlib.metadata.PackageNotFoundError:
        installed = None
    try:
        m = sys.modules.get(module) or importlib.import_module(module)
    except Exception as e:  # an ImportError, or whatever a broken package raises at import
        first = (str(e).strip().splitlines() or [""])[0]
        return None, None, f"{type(e).__name__}: {first}"[:200], installed
    where = getattr(m, "__file__", None) or next(iter(getattr(m, "__path__", [])), None)  # a folder without __init__
    folder = None if where is None else Path(where).resolve()
    folder = str(folder.parent if folder.name == "__init__.py" else folder) if folder else None
    return getattr(m, "__version__", None), folder, None, installed


def module_line(name, origin):
    """A problem line when Python cannot import the distribution's module or imports another one, else None."""
    version, folder, error, installed = origin
    module = MODULES[name]
    if error:
        return PROBLEM, (f"import {module} fails ({error}): pip install --force-reinstall -r requirements.txt, or "
                         f"remove what the error names")
    if installed and folder != installed:
        return PROBLEM, (f"Python imports {module} from {folder} (version {version or 'unknown'}), not the installed "
                         f"{name} in {installed}: rename or remove {folder}")
    return None


def course_mode():
    """(simulator: True/False/None, why, error) as `import course` decided it."""
    import course
    return course.SIMULATOR, course.WHY, getattr(course, "DEVICE_ERROR", None)


def executor():
    """True when launches run on the CPU executor (course/runtime/cpu.py), as `import course` decided."""
    import course
    return bool(getattr(course, "CPU", False))


def on_colab():
    """True inside a Google Colab runtime."""
    return "COLAB_RELEASE_TAG" in os.environ or "google.colab" in sys.modules


def nvidia_gpu_on_pci():
    """True when Linux lists an NVIDIA display controller on the PCI bus (with or without a driver)."""
    for dev in Path("/sys/bus/pci/devices").glob("*"):
        try:
            vendor, cls = (dev / "vendor").read_text().strip(), (dev / "class").read_text().strip()
        except OSError:
            continue
        if vendor == NVIDIA_PCI_VENDOR and cls.startswith(DISPLAY_CLASS):
            return True
    return False


def driver_release():
    """The NVIDIA driver's release, e.g. "550.54.15" (Linux: /proc/driver/nvidia/version), or None."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    words = [w for w in text.split() if w[:1].isdigit() and w.count(".") >= 1]
    return words[0] if words else None


def gpu_properties():
    """{name, cc, sms, shared_per_sm, shared_per_block} of the current GPU (numba-cuda on a real GPU)."""
    from numba import cuda
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return dict(name=name, cc=tuple(dev.compute_capability), sms=dev.MULTIPROCESSOR_COUNT,
                shared_per_sm=dev.MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
                shared_per_block=dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)


def nvjitlink_version():
    """(major, minor) of the nvJitLink numba-cuda links with (then the driver gets machine code, not PTX), or None
    when numba-cuda would not use it."""
    try:
        from numba.cuda.cudadrv.driver import _have_nvjitlink
        if not _have_nvjitlink():
            return None
        from cuda.bindings import nvjitlink
        return tuple(nvjitlink.version())[:2]
    except Exception:  # no cuda-bindings, or none with nvJitLink: numba-cuda hands the driver PTX
        return None


def nvvm_cuda_version():
    """(major, minor) of the CUDA toolkit whose NVVM numba-cuda compiles with (its wheel's version), or None."""
    for name in NVVM_PACKAGES:
        v = versions.installed(name)
        if v:
            return versions.version_tuple(v)
    return None


def tiny_kernel_error():
    """Compile, load and run a one-thread kernel on the GPU: None when it wrote its answer, else the error's text."""
    import numpy as np
    from numba import cuda

    @cuda.jit
    def doctor_kernel(out):
        out[0] = 42.0

    out = cuda.to_device(np.zeros(1, np.float32))
    try:
        doctor_kernel[1, 1](out)
        got = out.copy_to_host()[0]
    except Exception as e:  # CudaAPIError, LinkerError, NvvmError: the message names the driver's error
        return f"{type(e).__name__}: {' '.join(str(e).split())}"
    return None if got == 42.0 else f"the kernel ran but wrote {got}, not 42"


# --- the diagnosis: (level, line) pairs from what the probes found -------------------------------------------

def version_lines(found, newest_python=None, origins=None):
    """The Python and package lines: each in range, or a problem with its fix. With `origins`
    (imported_modules()): a module that fails to import, or is not the installed one, is that problem instead, and
    each ok line names the imported module's version and folder."""
    py = tuple(int(x) for x in found["python"].split(".")[:2])
    problem = versions.python_problem(py, newest_python)
    yield (PROBLEM, problem) if problem else (OK, f"Python {found['python']} (tested {tested_pythons()})")
    origins = origins or {}
    for name in (*versions.RANGES, "numba-cuda", "llvmlite"):
        line = module_line(name, origins[name]) if found.get(name) and name in origins else None
        if line:
            yield line
            continue
        version, where = origins.get(name, (None, None))[:2]
        version = version or found.get(name)  # the imported module's own __version__ where it has one
        level, text = package_line(name, version) if name in versions.RANGES else \
            next(other_package_lines(name, version))
        yield level, text + (f" from {where}" if level == OK and where else "")


def other_package_lines(name, version):
    """numba-cuda's or llvmlite's line."""
    if name == "llvmlite":
        yield (OK, f"llvmlite {version}") if version else \
            (PROBLEM, "llvmlite is not installed (numba needs it): pip install -r requirements.txt")
        return
    nc = version
    if nc is None:
        yield PROBLEM, 'numba-cuda is not installed: pip install -r requirements.txt'
    elif nc not in device.WRITTEN_FOR["numba-cuda"]:
        yield PROBLEM, (f"numba-cuda {nc} is not one the course was written for "
                        f"({' or '.join(device.WRITTEN_FOR['numba-cuda'])}): pip install -r requirements.txt")
    else:
        yield OK, f"numba-cuda {nc}" + (" (simulator only: the macOS build)" if nc in device.SIMULATOR_ONLY else "")


def tested_pythons():
    """ "3.10-3.14" (3.13 on an Intel Mac)."""
    (a, b), c = versions.PYTHON[0], versions.newest_python()
    return f"{a}.{b}-{c[0]}.{c[1]}"


def package_line(name, version):
    """numba's or numpy's line."""
    if version is None:
        return PROBLEM, f"{name} is not installed: pip install -r requirements.txt"
    problem = versions.range_problem(name, version)
    return (PROBLEM, problem) if problem else (OK, f"{name} {version} (tested {versions.requirement(name)})")


def simulator_lines(why, gpu_on_pci, colab, cpu=False):
    """What runs the kernels without a GPU (the CPU executor, or numba's CUDA simulator) and why, and a problem when
    an NVIDIA GPU is there but no driver is."""
    if cpu:
        yield OK, (f"device: the CPU executor ({why}): kernels compiled for the CPU by numba, the exercise checks in "
                   "numba's CUDA simulator")
    else:
        yield OK, f"device: numba's CUDA simulator ({why}): kernels run as Python, notebooks shrink their data"
    if why.startswith("no CUDA driver") and gpu_on_pci:
        yield PROBLEM, f"an NVIDIA GPU is on the PCI bus but no CUDA driver answers: {DRIVER_FIX}"
    elif why.startswith("no CUDA driver") and colab:
        yield PROBLEM, f"this Colab runtime has no GPU: {COLAB_HINT}"


def driver_lines(cuda_version, release):
    """The driver's line: too old for the CUDA 12 wheels, or fine."""
    if cuda_version is None:
        yield PROBLEM, f"no CUDA driver found (COURSE_DEVICE=gpu needs one): {DRIVER_FIX}, or unset COURSE_DEVICE"
        return
    what = f"NVIDIA driver {release or '(release unknown)'}, supports CUDA {cuda_version[0]}.{cuda_version[1]}"
    if cuda_version < OLDEST_DRIVER_CUDA:
        yield PROBLEM, f"{what}: numba-cuda[cu12] needs CUDA 12.0 or newer: {DRIVER_FIX}"
    else:
        yield OK, what


def gpu_lines(props):
    """Name, compute capability, SMs, shared memory; a note outside the compute capabilities the course compiles for."""
    cc = props["cc"]
    yield OK, (f"GPU: {props['name']}, compute capability {cc[0]}.{cc[1]}, {props['sms']} SMs, "
               f"{props['shared_per_sm'] // 1024} KiB shared memory per SM ({props['shared_per_block'] // 1024} KiB "
               "per block)")
    if not TESTED_CC[0] <= cc <= TESTED_CC[1]:
        yield NOTE, (f"compute capability {cc[0]}.{cc[1]} is outside the tested sm_75-sm_90: the kernels may work; "
                     "tests/test_compile.py lists what is checked")


def ptx_lines(cuda_version, nvvm, nvjitlink, kernel_error):
    """Does the driver take numba-cuda's code? nvJitLink links the PTX into machine code itself; without it the
    driver compiles PTX, and a driver older than the NVVM rejects it (CUDA_ERROR_UNSUPPORTED_PTX_VERSION)."""
    need = f"{nvvm[0]}.{nvvm[1]}" if nvvm else "12.0"
    fix = (f'pip install "nvidia-nvjitlink-cu12>={need}" (numba-cuda then links the PTX itself), or update the '
           f"NVIDIA driver to one for CUDA {need} or newer (https://www.nvidia.com/drivers)")
    if nvjitlink:
        yield OK, f"nvJitLink {nvjitlink[0]}.{nvjitlink[1]}: numba-cuda links kernels itself, the driver gets machine code"
        if nvvm and nvjitlink < nvvm:
            yield PROBLEM, (f"nvJitLink {nvjitlink[0]}.{nvjitlink[1]} is older than the NVVM "
                            f"({nvvm[0]}.{nvvm[1]}) that compiles the kernels: pip install "
                            f"\"nvidia-nvjitlink-cu12>={nvvm[0]}.{nvvm[1]}\"")
    elif nvvm and cuda_version and PTX_ISA.get(nvvm, (99, 0)) > PTX_ISA.get(cuda_version, (0, 0)):
        yield NOTE, (f"no nvJitLink: the driver (CUDA {cuda_version[0]}.{cuda_version[1]}) must compile PTX from "
                     f"CUDA {nvvm[0]}.{nvvm[1]}'s NVVM, which is newer")
    if kernel_error is None:
        yield OK, "a tiny kernel compiled, loaded and ran on the GPU"
    elif "UNSUPPORTED_PTX_VERSION" in kernel_error:
        yield PROBLEM, f"the driver rejects numba-cuda's PTX (CUDA_ERROR_UNSUPPORTED_PTX_VERSION): {fix}"
    else:
        yield PROBLEM, f"a tiny kernel failed on the GPU ({kernel_error[:200]}): run python -m course doctor again " \
                       "after a restart; if it persists, " + DRIVER_FIX


def diagnose():
    """Every (level, line) for this machine, from the probes above."""
    found = package_versions()
    lines = list(version_lines(found, origins=imported_modules()))
    yield from lines
    simulator, why, error = course_mode()
    if error and any(level == PROBLEM and text.startswith(("import ", "Python imports ")) for level, text in lines):
        yield NOTE, "import course stops there too (the problem above is why)"
        return
    if error:
        yield PROBLEM, f"import course: {error}"
        return
    if simulator:
        yield from simulator_lines(why, nvidia_gpu_on_pci(), on_colab(), executor())
        return
    cuda_version = device.driver_cuda_version()
    yield from driver_lines(cuda_version, driver_release())
    if cuda_version is None:
        return
    yield from gpu_lines(gpu_properties())
    yield from ptx_lines(cuda_version, nvvm_cuda_version(), nvjitlink_version(), tiny_kernel_error())


def summary(lines):
    """One line: all well, or how many problems and the first."""
    problems = [text for level, text in lines if level == PROBLEM]
    if not problems:
        return "doctor: all well"
    more = f" (and {len(problems) - 1} more: python -m course doctor)" if len(problems) > 1 else ""
    return f"doctor: {len(problems)} problem{'s' * (len(problems) > 1)}: {problems[0]}{more}"


def main(out=None):
    """Print each line and the summary; return 0 when nothing is a problem, else 1."""
    out = out or sys.stdout
    lines = list(diagnose())
    for level, text in lines:
        print(f"{level:<7} {text}", file=out)
    problems = sum(level == PROBLEM for level, _ in lines)
    print("doctor: all well" if not problems else
          f"doctor: {problems} problem{'s' * (problems > 1)} (PROBLEM above, each with its fix)", file=out)
    return 1 if any(level == PROBLEM for level, _ in lines) else 0


def version_summary():
    """course.info()'s second line: the versions (and on a GPU the driver's CUDA) in one line, or the first problem
    with them and its fix. Quick: no kernel is compiled (`python -m course doctor` does that)."""
    found = package_versions()
    lines = list(version_lines(found, origins=imported_modules()))
    simulator, _, _ = course_mode()
    cuda_version = None if simulator else device.driver_cuda_version()
    if simulator is False:
        lines += list(driver_lines(cuda_version, None))
    problems = [text for level, text in lines if level == PROBLEM]
    if problems:
        return summary(lines)
    names = ("numba", "numba-cuda", "numpy")
    driver = f", a driver for CUDA {cuda_version[0]}.{cuda_version[1]}" if cuda_version else ""
    return (f"versions: Python {found['python']}, " + ", ".join(f"{n} {found[n]}" for n in names) + driver +
            " (tested; python -m course doctor checks the GPU too)")


if __name__ == "__main__":
    sys.exit(main())
