"""`python -m course doctor` and the version checks of `import course`, with faked versions, drivers and GPUs
(monkeypatch on the probes of course/runtime/doctor.py): no GPU needed."""
import io
import os
import subprocess
import sys

import pytest

from course.runtime import device, versions
from course.runtime import doctor

GOOD = {"python": "3.12.4", "numba": "0.68.1", "numba-cuda": "0.30.4", "numpy": "2.4.6", "llvmlite": "0.50.0"}
T4 = dict(name="Tesla T4", cc=(7, 5), sms=40, shared_per_sm=64 * 1024, shared_per_block=64 * 1024)
PTX_ERROR = ("CudaAPIError: [222] Call to cuModuleLoadDataEx results in CUDA_ERROR_UNSUPPORTED_PTX_VERSION")


def fake(monkeypatch, found=GOOD, mode=(False, "the CUDA driver reports 1 device(s)", None), driver=(12, 4),
         nvjitlink=(12, 9), kernel_error=None, props=T4, pci=False, colab=False, origins=None, cpu=False):
    """Make every probe of the doctor answer as given (defaults: Colab's T4 on driver 550 with nvJitLink 12.9, each
    package imported from where it is installed)."""
    site = "/venv/lib/python3.12/site-packages"
    imported = {n: (found[n], f"{site}/{doctor.MODULES[n]}", None, f"{site}/{doctor.MODULES[n]}")
                for n in versions.PACKAGES if found.get(n)}
    monkeypatch.setattr(doctor, "package_versions", lambda: dict(found))
    monkeypatch.setattr(doctor, "imported_modules", lambda: {**imported, **(origins or {})})
    monkeypatch.setattr(doctor, "executor", lambda: cpu)
    monkeypatch.setattr(doctor, "course_mode", lambda: mode)
    monkeypatch.setattr(device, "driver_cuda_version", lambda: driver)
    monkeypatch.setattr(doctor, "driver_release", lambda: "550.54.15")
    monkeypatch.setattr(doctor, "gpu_properties", lambda: dict(props))
    monkeypatch.setattr(doctor, "nvvm_cuda_version", lambda: (12, 9))
    monkeypatch.setattr(doctor, "nvjitlink_version", lambda: nvjitlink)
    monkeypatch.setattr(doctor, "tiny_kernel_error", lambda: kernel_error)
    monkeypatch.setattr(doctor, "nvidia_gpu_on_pci", lambda: pci)
    monkeypatch.setattr(doctor, "on_colab", lambda: colab)


def run_doctor():
    """(exit code, printed lines)."""
    out = io.StringIO()
    code = doctor.main(out)
    return code, out.getvalue().splitlines()


def problems(lines):
    return [line for line in lines if line.startswith(doctor.PROBLEM)]


def test_a_t4_on_driver_550_with_nvjitlink_is_all_well(monkeypatch):
    fake(monkeypatch)
    code, lines = run_doctor()
    assert code == 0 and not problems(lines), lines
    assert lines[-1] == "doctor: all well"
    text = "\n".join(lines)
    for want in ("550.54.15, supports CUDA 12.4", "Tesla T4, compute capability 7.5, 40 SMs, 64 KiB", "nvJitLink 12.9",
                 "tiny kernel compiled, loaded and ran"):
        assert want in text


@pytest.mark.parametrize("found, says", [
    ({**GOOD, "python": "3.15.0"}, "Python 3.15 is not supported: the course runs on Python 3.10 to 3.14"),
    ({**GOOD, "python": "3.9.18"}, "Python 3.9 is not supported"),
    ({**GOOD, "numba": "0.69.0"}, 'numba 0.69.0 is outside numba>=0.61,<0.69 (0.68 is the newest CI has run): '
                                  'pip install "numba>=0.61,<0.69"'),
    ({**GOOD, "numba": "0.60.0"}, "numba 0.60.0 is outside numba>=0.61,<0.69"),
    ({**GOOD, "numpy": "2.5.0"}, 'numpy 2.5.0 is outside numpy>=2.0,<2.5 (numba-cuda 0.30.4 fails'),
    ({**GOOD, "numba-cuda": "0.22.2"}, "numba-cuda 0.22.2 is not one the course was written for"),
    ({**GOOD, "numba-cuda": None}, "numba-cuda is not installed"),
])
def test_a_wrong_version_is_one_problem_line_with_its_fix(monkeypatch, found, says):
    fake(monkeypatch, found=found)
    code, lines = run_doctor()
    (line,) = problems(lines)
    assert code == 1 and says in line, line
    assert "pip install" in line or "virtual environment" in line  # the fix


def test_a_driver_too_old_for_the_ptx_says_how_to_fix_it(monkeypatch):
    fake(monkeypatch, nvjitlink=None, kernel_error=PTX_ERROR)  # a T4 on an older driver (as GPU-Puzzles' users met it)
    code, lines = run_doctor()
    (line,) = problems(lines)
    assert code == 1 and "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" in line
    assert 'pip install "nvidia-nvjitlink-cu12>=12.9"' in line and "driver to one for CUDA 12.9" in line
    assert any(l.startswith(doctor.NOTE) and "no nvJitLink" in l for l in lines)  # predicted before the launch


def test_nvjitlink_older_than_the_nvvm_is_a_problem(monkeypatch):
    fake(monkeypatch, nvjitlink=(12, 4))
    code, lines = run_doctor()
    (line,) = problems(lines)
    assert code == 1 and "nvJitLink 12.4 is older than the NVVM (12.9)" in line


@pytest.mark.parametrize("driver, says", [(None, "no CUDA driver found (COURSE_DEVICE=gpu needs one)"),
                                          ((11, 8), "supports CUDA 11.8: numba-cuda[cu12] needs CUDA 12.0")])
def test_a_missing_or_old_driver_is_one_problem_line(monkeypatch, driver, says):
    fake(monkeypatch, mode=(False, "COURSE_DEVICE=gpu", None), driver=driver)
    code, lines = run_doctor()
    (line,) = problems(lines)
    assert code == 1 and says in line and "NVIDIA driver" in line


def test_the_simulator_without_a_gpu_is_fine_but_a_gpu_without_a_driver_is_not(monkeypatch):
    fake(monkeypatch, mode=(True, "no CUDA driver or device was found", None))
    assert run_doctor()[0] == 0
    fake(monkeypatch, mode=(True, "no CUDA driver or device was found", None), pci=True)
    code, lines = run_doctor()
    (line,) = problems(lines)
    assert code == 1 and "NVIDIA GPU is on the PCI bus but no CUDA driver" in line


def test_without_a_gpu_the_device_line_names_what_runs_the_kernels(monkeypatch):
    """A regression: the CPU executor was called the simulator, whose data the notebooks shrink."""
    fake(monkeypatch, mode=(True, "no CUDA driver or device was found", None), cpu=True)
    code, lines = run_doctor()
    (line,) = [l for l in lines if "device:" in l]
    assert code == 0 and "the CPU executor (no CUDA driver" in line and "simulator (" not in line
    assert "shrink" not in line and "exercise checks in numba's CUDA simulator" in line
    fake(monkeypatch, mode=(True, "COURSE_DEVICE=sim", None))
    (line,) = [l for l in run_doctor()[1] if "device:" in l]
    assert "numba's CUDA simulator (COURSE_DEVICE=sim)" in line and "CPU executor" not in line


def test_a_shadowing_module_or_a_failed_import_is_the_problem_reported(monkeypatch):
    """A regression: versions came from installed metadata: a shadowing numba was "ok numba 0.68.1", and a
    numba_cuda failing at import a version mismatch whose fix was pip install."""
    site = "/venv/lib/python3.12/site-packages"
    fake(monkeypatch, origins={"numba": ("0.1.0", "/home/me/numba", None, f"{site}/numba")},
         mode=(True, None, "No module named 'numba.core'"))
    code, lines = run_doctor()
    (line,) = problems(lines)
    assert code == 1 and "Python imports numba from /home/me/numba (version 0.1.0), not the installed numba in " \
        f"{site}/numba: rename or remove /home/me/numba" in line, lines
    assert not any(l.startswith("ok") and "numba 0.68.1" in l for l in lines)
    written_for = "course/runtime/device.py patches numba's CUDA simulator and was written for numba-cuda 0.30.4"
    fake(monkeypatch, origins={"numba-cuda": (None, None, "ImportError: cannot import name 'x' from 'cuda'",
                                              f"{site}/numba_cuda")}, mode=(True, None, written_for))
    code, lines = run_doctor()
    (line,) = problems(lines)
    assert code == 1 and line.endswith("import numba_cuda fails (ImportError: cannot import name 'x' from 'cuda'): "
                                       "pip install --force-reinstall -r requirements.txt, or remove what the "
                                       "error names"), lines
    assert not any("written for" in l or "numba-cuda 0.30.4" in l for l in lines)
    fake(monkeypatch)
    assert any(l == f"ok      numba 0.68.1 (tested numba>=0.61,<0.69) from {site}/numba" for l in run_doctor()[1])


def test_python_m_course_doctor_with_a_shadowing_numba_and_a_broken_numba_cuda(tmp_path):
    """The probes themselves (no fakes): what Python imports, from where, and an import's own error."""
    (tmp_path / "shadow" / "numba").mkdir(parents=True)
    (tmp_path / "shadow" / "numba" / "__init__.py").write_text('__version__ = "0.1.0"\n')
    (tmp_path / "broken" / "numba_cuda").mkdir(parents=True)
    (tmp_path / "broken" / "numba_cuda" / "__init__.py").write_text('raise ImportError("no cuda.bindings here")\n')
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_DEVICE", "NUMBA_ENABLE_CUDASIM")}
    path = os.pathsep.join([str(tmp_path / "{}"), os.environ.get("PYTHONPATH", "")])
    for folder, says in (("shadow", f"Python imports numba from {tmp_path / 'shadow' / 'numba'} (version 0.1.0)"),
                         ("broken", "import numba_cuda fails (ImportError: no cuda.bindings here)")):
        r = subprocess.run([sys.executable, "-m", "course", "doctor"], capture_output=True, text=True, timeout=120,
                           env={**env, "COURSE_DEVICE": "sim", "PYTHONPATH": path.format(folder)})
        (line,) = problems(r.stdout.splitlines())
        assert r.returncode == 1 and says in line, r.stdout + r.stderr


def test_colab_without_a_gpu_runtime_says_which_menu(monkeypatch):
    fake(monkeypatch, mode=(True, "no CUDA driver or device was found", None), colab=True)
    code, lines = run_doctor()
    (line,) = problems(lines)
    assert code == 1 and "Runtime > Change runtime type > T4 GPU" in line


def test_a_gpu_older_than_the_t4_is_a_note_not_a_problem(monkeypatch):
    fake(monkeypatch, props={**T4, "name": "Tesla P100", "cc": (6, 0)})
    code, lines = run_doctor()
    assert code == 0 and any(l.startswith(doctor.NOTE) and "6.0 is outside the tested" in l for l in lines)


def test_every_line_is_one_line(monkeypatch):
    fake(monkeypatch, found={**GOOD, "numba": "0.70.1", "python": "3.15.0"}, nvjitlink=None, kernel_error=PTX_ERROR)
    code, lines = run_doctor()
    assert code == 1 and len(problems(lines)) == 3
    assert lines[-1] == "doctor: 3 problems (PROBLEM above, each with its fix)"


def test_info_summary_is_one_line_naming_the_first_problem(monkeypatch):
    fake(monkeypatch)
    assert doctor.version_summary().startswith("versions: Python 3.12.4, numba 0.68.1, numba-cuda 0.30.4, numpy "
                                               "2.4.6, a driver for CUDA 12.4 (tested;")
    fake(monkeypatch, driver=(11, 8))
    assert doctor.version_summary().startswith("doctor: 1 problem: NVIDIA driver (release unknown), supports CUDA "
                                               "11.8: numba-cuda[cu12] needs CUDA 12.0")
    fake(monkeypatch, mode=(True, "COURSE_DEVICE=sim", None))
    assert "driver" not in doctor.version_summary()
    fake(monkeypatch, found={**GOOD, "numba": "0.69.0"})
    line = doctor.version_summary()
    assert "\n" not in line and line.startswith("doctor: 1 problem: numba 0.69.0 is outside")


def test_import_course_warns_one_line_per_problem(monkeypatch, capsys):
    monkeypatch.setattr(versions, "installed", {"numba": "0.69.0", "numpy": "2.4.0"}.get)
    monkeypatch.setattr(sys, "version_info", (3, 15, 0))
    versions.warn_at_import()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("course: warning: Python 3.15 is not supported")
    assert err[1].startswith("course: warning: numba 0.69.0 is outside numba>=0.61,<0.69")


def test_numpy_2_5_stops_import_course_on_a_gpu_only():
    assert versions.fatal(simulator=False, versions={"numpy": "2.5.0"}).startswith("numpy 2.5.0 is outside")
    assert versions.fatal(simulator=True, versions={"numpy": "2.5.0"}) is None
    assert versions.fatal(simulator=False, versions={"numpy": "2.4.6"}) is None


def test_an_intel_mac_is_supported_up_to_3_13():
    assert versions.newest_python(machine="x86_64", system="Darwin") == (3, 13)
    assert versions.newest_python(machine="arm64", system="Darwin") == (3, 14)
    assert versions.python_problem((3, 14), newest=(3, 13)).startswith("Python 3.14 is not supported")


def test_python_m_course_doctor_here():
    """This environment is the tested one (CI installs requirements.txt): exit code 0 and the summary last."""
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_DEVICE", "NUMBA_ENABLE_CUDASIM")}
    r = subprocess.run([sys.executable, "-m", "course", "doctor"], capture_output=True, text=True, timeout=120,
                       env={**env, "COURSE_DEVICE": "sim"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "doctor: all well" and "COURSE_DEVICE=sim" in r.stdout


@pytest.mark.skipif(not __import__("course").SIMULATOR, reason="the banner is printed without a GPU only")
def test_the_banner_goes_to_stdout_in_a_notebook_and_to_stderr_elsewhere(monkeypatch, capsys):
    """A regression: JupyterLab painted the banner red (stderr); a script's stdout stays its own."""
    import IPython
    from IPython.core.interactiveshell import InteractiveShell

    import course

    class ZMQInteractiveShell(InteractiveShell):  # ipykernel's, by name
        pass
    course.banner()
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(("course: CPU executor", "course: CUDA simulator")) and err.count("\n") == 1
    monkeypatch.setattr(IPython, "get_ipython", lambda: object.__new__(ZMQInteractiveShell))
    course.banner()
    out, err = capsys.readouterr()
    assert err == "" and out.startswith(("course: CPU executor", "course: CUDA simulator")) and out.count("\n") == 1
