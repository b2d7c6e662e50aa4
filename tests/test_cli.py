"""`python -m course`: every bad argument, missing device, unusable file or interruption gives one line and exit
code 2 (130 for Ctrl-C), before any work and without the simulator's banner; a finished run's results are never
lost; `execute` leaves a notebook whose cell failed untouched and says which cell."""
import errno
import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import course
from course.__main__ import main
from course.tools.cli import write_json

BANNERS = ("course: CUDA simulator", "course: CPU executor")  # without a GPU: which one runs the kernels


def cli(capsys, *args):
    """main() in this process: (exit code, stdout, stderr)."""
    try:
        rc = main(list(args))
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def sub(*args, timeout=120, **env):
    """`python -m course ...` in a fresh process (the banner, COURSE_DEVICE and argv only show there)."""
    return subprocess.run([sys.executable, "-m", "course", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **env})


def dataset(root, n_train, n_test, seed=0):
    """Four small MNIST-format files and a SHA256SUMS naming them (other data, verified)."""
    root.mkdir()
    rng = np.random.default_rng(seed)
    lines = []
    for name, n in (("train", n_train), ("t10k", n_test)):
        images = b"\x00\x00\x08\x03" + n.to_bytes(4, "big") + (28).to_bytes(4, "big") * 2 + rng.integers(
            0, 256, n * 784, dtype=np.uint8).tobytes()
        labels = b"\x00\x00\x08\x01" + n.to_bytes(4, "big") + rng.integers(0, 10, n, dtype=np.uint8).tobytes()
        for kind, data in (("images-idx3", images), ("labels-idx1", labels)):
            (root / f"{name}-{kind}-ubyte.gz").write_bytes(gzip.compress(data))
            lines.append(f"{hashlib.sha256(data).hexdigest()}  {name}-{kind}-ubyte")
    (root / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    return root


@pytest.mark.parametrize("args, says", [
    ([], "choose a command: info, doctor, train, bench, race, export, exercises, execute, download"),
    (["train", "--seed", "-1"], "argument --seed: must be 0 or more, got -1"),
    (["train", "--hidden", "1000000000"], "argument --hidden: must be at most 65,536"),
    (["train", "--hidden", "0"], "argument --hidden: must be at least 1"),
    (["train", "--epochs", "-3"], "argument --epochs: must be at least 1"),
    (["train", "--epochs", "many"], "argument --epochs: 'many' is not a whole number"),
    (["train", "--epochs", str(10**20)], "argument --epochs: must be at most 10,000"),
    (["race", "--target", "2"], "argument --target: must be a test accuracy from 0 to 1, got 2"),
    (["race", "--target", "nan"], "argument --target: must be a test accuracy from 0 to 1, got nan"),
    (["race", "--target", "-0.5"], "argument --target: must be a test accuracy from 0 to 1"),
    (["race", "--seeds", str(10**19)], "argument --seeds: must be at most 100"),
    (["race", "--seeds", "1e19"], "argument --seeds: '1e19' is not a whole number"),
    (["train", "--batch-size", "0"], "argument --batch-size: must be at least 1"),
    (["train", "--lr", "-0.1"], "argument --lr: must be a positive number"),
    (["train", "--lr", "nan"], "argument --lr: must be a positive number"),
    (["train", "--optimizer", "rmsprop"], "invalid choice"),
    (["train", "--data-dir", "/no/such/dir"], "is not a directory"),
    (["train", "--out", "{tmp}"], "is a directory"),
    (["train", "--out", "{tmp}/no/r.json"], "does not exist"),
    (["bench", "--out", "{tmp}"], "is a directory"),
    (["execute", "--timeout", "0", "x.ipynb"], "argument --timeout: must be at least 1"),
    (["execute", "--timeout", "-1", "x.ipynb"], "argument --timeout: must be at least 1"),
    (["execute", "{tmp}/missing.ipynb"], "no such notebook"),
    (["execute", "{tmp}/text.ipynb"], "not a notebook (not JSON"),
    (["execute", "{tmp}/list.ipynb"], "not a notebook (JSON without a list of cells)"),
    (["execute", "{tmp}/cells.ipynb"], "not a notebook nbformat can read"),
    (["download", "--root", "{tmp}/text.ipynb"], "is a file, not a directory"),
    (["download", "--root", "{tmp}/text.ipynb/sub"], "cannot create --root"),
    (["download", "--root", "{tmp}/d", "--mirror", "notaurl"], "not an http:// or https:// URL"),
    (["download", "--root", "{tmp}/d", "--mirror", "http://127.0.0.1:abc/"], "ort"),
    (["download", "--root", "{tmp}/d", "--mirror", ""], "mirror URL is empty"),
    (["train", "--data-dir", "{tmp}"], "not found in"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_bad_arguments_get_one_line_and_exit_2(capsys, tmp_path, args, says):
    (tmp_path / "text.ipynb").write_text("print('hello')\n")
    (tmp_path / "list.ipynb").write_text("[1, 2]\n")
    (tmp_path / "cells.ipynb").write_text('{"cells": [], "nbformat": 99}\n')
    rc, out, err = cli(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert rc == 2 and err.count("\n") == 1 and says in err, err
    assert "Traceback" not in err and not any(b in err for b in BANNERS) and out == ""


@pytest.mark.skipif(not course.SIMULATOR, reason="this machine has a GPU")
def test_race_and_the_scaling_sweep_without_a_gpu_refuse_in_one_line(capsys, tmp_path):
    """A regression: the race ran the fused kernel at full size off the GPU, then a traceback; the sweep's --out
    was checked after the run."""
    rc, out, err = cli(capsys, "race")
    lines = err.splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err and out == "", err
    assert lines[0].startswith("python -m course race: error: the race times GPU kernels and needs a GPU")
    assert "notebooks/results/race-h100.json holds an H100's race, and --quick checks the pipeline here" in lines[0]
    from course.tools import scaling
    for args, says in ((["--out", str(tmp_path / "no" / "s.json")], "the directory"),
                       (["--out", str(tmp_path)], "is a directory"), ([], "the sweep times GPU kernels and needs a GPU")):
        with pytest.raises(SystemExit) as e:
            scaling.main(["--quick", *args] if args else args)
        out, err = capsys.readouterr()
        assert e.value.code == 2 and err.count("\n") == 1 and says in err and out == "", err


def test_dataset_without_test_images(capsys, tmp_path):
    root = dataset(tmp_path / "d", 40, 0)
    rc, out, err = cli(capsys, "train", "--data-dir", str(root), "--batch-size", "8")
    assert rc == 2 and err.count("\n") == 1 and "has no test images" in err, err


def test_the_dataset_read_is_the_one_reported(tmp_path, monkeypatch):
    """--data-dir decides what is read; --dataset must then agree; the report names what was read."""
    import argparse

    import course.data
    from course.tools.cli import CommandError
    from course.tools.cli_train import load
    root = dataset(tmp_path / "d", 30, 20)
    sums = dict(reversed(line.split()) for line in (root / "SHA256SUMS").read_text().splitlines())
    args = argparse.Namespace(data_dir=root, dataset=None)
    assert load(args)[1] == "other (verified by its SHA256SUMS)"
    monkeypatch.setitem(course.data.KNOWN_SHA256, "fashion-mnist", sums)  # now these files are "Fashion-MNIST"
    assert load(args)[1] == "fashion-mnist"
    with pytest.raises(CommandError, match="holds Fashion-MNIST, not MNIST"):
        load(argparse.Namespace(data_dir=root, dataset="mnist"))


@pytest.mark.slow
def test_help_and_errors_come_without_the_banner():
    r = sub("--help")
    assert r.returncode == 0 and "info" in r.stdout and r.stderr == ""
    r = sub("train", "--seed", "-1")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and not any(b in r.stderr for b in BANNERS)
    if course.SIMULATOR:
        assert any(b in sub("info").stderr for b in BANNERS)  # where a device is used, it is said which


def test_a_bad_course_device_only_stops_the_commands_that_need_one(tmp_path):
    r = sub("info", COURSE_DEVICE="bogus")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "COURSE_DEVICE='bogus'" in r.stderr
    r = sub("train", "--quick", COURSE_DEVICE="")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "COURSE_DEVICE=''" in r.stderr, r.stderr
    assert sub("download", "--help", COURSE_DEVICE="bogus").returncode == 0
    r = sub("download", "--root", str(tmp_path), "--mirror", "x", COURSE_DEVICE="bogus")
    assert r.returncode == 2 and "not an http" in r.stderr


@pytest.mark.slow
@pytest.mark.skipif(not course.SIMULATOR, reason="this machine has a GPU")
def test_insisting_on_a_gpu_without_one():
    for args in (["info"], ["train", "--quick", "--epochs", "1"]):
        r = sub(*args, COURSE_DEVICE="gpu")
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no usable CUDA GPU" in r.stderr, r.stderr


def test_importing_numba_first_does_not_split_the_mode():
    """`import numba` (not numba.cuda) before course, numba's setting the other way: the two must still agree."""
    code = ("import numba, course; from numba.core import config; from numba import cuda;"
            "print(course.SIMULATOR, bool(config.ENABLE_CUDASIM)); cuda.to_device([1.0])")
    mode = "0" if course.SIMULATOR else "1"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NUMBA_ENABLE_CUDASIM": mode,
                            "COURSE_DEVICE": "sim" if course.SIMULATOR else "gpu"})
    assert r.returncode == 0, r.stderr
    a, b = r.stdout.split()
    assert a == b == str(course.SIMULATOR)


def test_ctrl_c_during_training_is_one_line_and_130(tmp_path):
    # stderr into a file, as a terminal takes it. A SIGINT that came while numba compiled a kernel for the CPU
    # executor was lost (ctypes drops an exception raised in llvmlite's callback): 3 of 8 runs trained on before
    # course.runtime.cpu._ctrl_c_after (tests/test_cpu.py shows the mechanism), 0 of 26 since.
    with open(tmp_path / "stderr", "w+") as errf:
        p = subprocess.Popen([sys.executable, "-m", "course", "train", "--quick", "--epochs", "10000"], text=True,
                             stdout=subprocess.PIPE, stderr=errf, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # even if we ignore it
        try:
            for line in p.stdout:  # the line just before the loop starts
                if "test images on" in line:
                    break
            time.sleep(2)
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=60)
        finally:
            p.kill()
        errf.seek(0)
        err = errf.read()
    assert p.returncode == 130
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith((*BANNERS, "epoch ", "\r"))
             and "it/s]" not in line]
    assert lines == ["python -m course train: interrupted"], err


def test_results_that_cannot_be_written_are_kept(tmp_path, capsys):
    result = {"test_accuracy": 0.98}
    target = tmp_path / "gone" / "r.json"  # its directory vanished during the run
    assert write_json(target, result) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"could not write {target}" in err
    rescue = err.rsplit("the results are in ", 1)[1].strip()
    assert json.loads(open(rescue).read()) == result
    os.unlink(rescue)
    assert write_json(tmp_path / "r.json", result) == 0 and json.loads((tmp_path / "r.json").read_text()) == result
    assert not list(tmp_path.glob(".*part"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever the permissions say")
def test_a_read_only_out_is_refused_before_training(capsys, tmp_path):
    tmp_path.chmod(0o555)
    try:
        rc, _, err = cli(capsys, "train", "--out", str(tmp_path / "r.json"))
    finally:
        tmp_path.chmod(0o755)
    assert rc == 2 and "cannot be written" in err


def notebook(path, *sources):
    cells = [dict(cell_type="code", id=f"cell-{i}", metadata={}, outputs=[], execution_count=None, source=s)
             for i, s in enumerate(sources)]
    nb = dict(cells=cells, metadata=dict(kernelspec=dict(name="python3", display_name="Python 3",
                                                         language="python")), nbformat=4, nbformat_minor=5)
    path.write_text(json.dumps(nb, indent=1) + "\n")
    return path.read_bytes()


@pytest.mark.parametrize("sources, timeout, says", [
    (["x = 1", "# load\ny = 1 / 0", "z = 3"], 60, "cell 1 (id cell-1, '# load') failed: ZeroDivisionError"),
    (["x = 1", "import time\ntime.sleep(30)"], 2, "cell 1 (id cell-1, 'import time') timed out after 2 s"),
    (["raise MemoryError()"], 60, "cell 0 (id cell-0, 'raise MemoryError()') failed: MemoryError; the notebook"),
], ids=["error", "timeout", "no message"])
def test_a_failed_execution_leaves_the_notebook_untouched(capsys, tmp_path, sources, timeout, says):
    path = tmp_path / "nb.ipynb"
    before = notebook(path, *sources)
    rc, _, err = cli(capsys, "execute", "--timeout", str(timeout), str(path))
    assert rc == 1 and path.read_bytes() == before
    assert err.count("\n") == 1 and says in err and "left unchanged" in err, err


def test_a_good_execution_saves_the_outputs(capsys, tmp_path):
    """Through a link, into the file it names, whose mode stays (a regression: the link was replaced by a file,
    and a 0600 notebook became 0644)."""
    real, path = tmp_path / "work" / "nb.ipynb", tmp_path / "nb.ipynb"
    real.parent.mkdir()
    notebook(real, "print(6 * 7)")
    real.chmod(0o600)
    os.symlink(real, path)
    rc, out, _ = cli(capsys, "execute", str(path))
    assert rc == 0 and "ok in" in out
    assert path.is_symlink() and os.readlink(path) == str(real) and (real.stat().st_mode & 0o777) == 0o600
    assert "".join(json.loads(real.read_text())["cells"][0]["outputs"][0]["text"]) == "42\n"
    assert not list(tmp_path.rglob("*.part"))


@pytest.mark.parametrize("cmd", ["train", "bench"])
@pytest.mark.parametrize("where", ["/dev/null", "a fifo", "a link to /dev/null"])
def test_an_out_that_is_not_a_regular_file_is_refused_before_any_work(capsys, tmp_path, cmd, where):
    """As root (a container), --out /dev/null would have replaced the device with a JSON file."""
    out = {"/dev/null": "/dev/null", "a fifo": str(tmp_path / "fifo"), "a link to /dev/null": str(tmp_path / "l")}
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/null", tmp_path / "l")
    rc, stdout, err = cli(capsys, cmd, "--out", out[where])
    assert rc == 2 and err.count("\n") == 1 and "is not a regular file" in err, err
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def test_results_are_written_through_a_link(tmp_path, capsys):
    real, link = tmp_path / "results" / "r.json", tmp_path / "latest.json"
    real.parent.mkdir()
    real.write_text("{}")
    os.symlink(real, link)
    assert write_json(link, {"test_accuracy": 0.97}) == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert json.loads(real.read_text()) == {"test_accuracy": 0.97}
    assert not list(tmp_path.rglob(".*part"))
    assert write_json(tmp_path / "r2.json", {"a": 1}) == 0  # a plain file as before


def test_an_execution_that_cannot_be_saved_keeps_its_outputs(capsys, tmp_path, monkeypatch):
    """A read-only folder or a full disk after the run: one line, the run kept in the temp dir."""
    path = tmp_path / "nb.ipynb"
    before = notebook(path, "print(6 * 7)")
    replace = os.replace

    def full_disk(src, dst, *args, **kwargs):  # the executed notebook's last step, onto the notebook: it fails
        if os.fspath(dst) == str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        return replace(src, dst, *args, **kwargs)
    monkeypatch.setattr(os, "replace", full_disk)
    rc, _, err = cli(capsys, "execute", str(path))
    assert rc == 1 and path.read_bytes() == before and err.count("\n") == 1, err
    assert "ran in" in err and "could not be saved" in err and "Traceback" not in err
    rescue = err.split("the executed notebook is in ", 1)[1].split(";", 1)[0]
    assert "".join(json.loads(open(rescue).read())["cells"][0]["outputs"][0]["text"]) == "42\n"
    assert not list(tmp_path.glob("*.part"))
    os.unlink(rescue)


def test_ctrl_c_during_execute_stops_every_notebook_in_one_line_and_130(tmp_path):
    """A regression: Ctrl-C (to the terminal's process group) while A ran reported A's kernel as dead, ran B,
    and ended in nbclient's traceback with rc 1."""
    a, b = tmp_path / "a.ipynb", tmp_path / "b.ipynb"
    before = notebook(a, "import pathlib, time\npathlib.Path('started').touch()\ntime.sleep(60)"), notebook(b, "1")
    p = subprocess.Popen([sys.executable, "-m", "course", "execute", str(a), str(b)], text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists() and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.2)
        os.killpg(p.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the command and its kernel
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130 and err.splitlines() == ["python -m course execute: interrupted"], err
    assert (a.read_bytes(), b.read_bytes()) == before and "ok in" not in out


def test_a_timed_out_cell_is_one_line_without_the_kernel_s_traceback(capfd, tmp_path):
    """A regression: the kernel killed at the timeout printed ~20 lines of ZMQ traceback on its own stderr."""
    path = tmp_path / "nb.ipynb"
    notebook(path, "x = 1", "import time\ntime.sleep(60)")
    assert main(["execute", "--timeout", "2", str(path)]) == 1
    err = [line for line in capfd.readouterr().err.splitlines() if "without encryption" not in line]
    assert len(err) == 1 and "timed out after 2 s" in err[0], err


@pytest.mark.skipif(not course.SIMULATOR, reason="--quick checks the kernels against the NumPy twin in the simulator")
def test_train_mine_quick_whose_kernels_differ_from_the_twin_is_one_line(capsys, tmp_path, monkeypatch):
    """No AssertionError traceback, and the simulator's banner printed once, not twice."""
    import course.train
    from course.tools import cli as cli_module

    def differs(*args, **kw):
        raise AssertionError("the kernels' losses [2.3 2.1] differ from the NumPy twin's [2.3 2.2]: train_step "
                             "(or a kernel) does not compute what the twin does")
    monkeypatch.setattr(course.train, "fit_sim", differs)
    monkeypatch.setattr(course, "runs_on", lambda: "sim")  # --quick trains with fit_sim where the simulator runs
    monkeypatch.setattr(cli_module, "_ANNOUNCED", [])
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    rc, out, err = cli(capsys, "train", "--mine", "--quick", "--epochs", "1")
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 1 and "Traceback" not in err and len(lines) == 2, err
    assert lines[0].startswith(BANNERS) and lines[1].startswith("error: the kernels' losses [2.3 2.1] differ")
    assert "--mine: the table above says which kernels were yours" in lines[1]
