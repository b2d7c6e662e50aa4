"""course.runtime.mine: a simulated student's passing solutions train the network; edited or failed ones are not used."""
import json
import os
import shutil

import numpy as np
import pytest
from numba import cuda

import course
from course.runtime import mine, registry, solutions
from course.tools import colab, nbtools
from course.checks.core import CheckFailure
from course.checks.data import check_scale_kernel
from simulated_student import run_cell, simulate_student

STUDENT_NOTEBOOKS = [nbtools.NOTEBOOKS / n for n in ("01_data.ipynb", "02_forward.ipynb", "03_loss.ipynb",
                                                      "04_grad.ipynb", "05_update.ipynb", "06_train.ipynb")]
SCALE_CELL = '''import numpy as np
from numba import cuda


# Exercise 1.2: scale uint8 pixels to float32 in [0, 1]
@cuda.jit
def scale_kernel(x, out):
    """One thread per element: out[i] = x[i] / 255."""
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] / np.float32(255.0)
'''


@cuda.jit
def scale_in_a_file(x, out):
    """A correct scale kernel, but in a .py file (a test's), not a student's notebook cell."""
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i] / np.float32(255.0)


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """A student who did 01-06 (the solutions typed into the exercise cells, each check run): their saved work.
    About 30 s in the simulator."""
    d = tmp_path_factory.mktemp("student") / "mine"
    old = os.environ.get("COURSE_MINE_DIR")
    os.environ["COURSE_MINE_DIR"] = str(d)
    try:
        simulate_student(STUDENT_NOTEBOOKS)
    finally:
        os.environ.pop("COURSE_MINE_DIR") if old is None else os.environ.__setitem__("COURSE_MINE_DIR", old)
    return d


@pytest.fixture
def mine_dir(student, tmp_path, monkeypatch):
    """A private copy of the student's saved work, as COURSE_MINE_DIR; the course's kernels put back after."""
    d = tmp_path / "mine"
    shutil.copytree(student, d)
    monkeypatch.setenv("COURSE_MINE_DIR", str(d))
    yield d
    mine.use_course()


def tiny_data():
    from course.data import load_mnist
    from course.train import pool
    X, y, Xt, yt = load_mnist()
    return pool(X[:32], 4), y[:32], pool(Xt[:32], 4), yt[:32]  # (32, 49): 2 steps of 16


def row(out, key):
    """The 'whose' column of the table's row for exercise `key`."""
    piece = mine.PIECES[key][0]
    line = next(l for l in out.splitlines() if l.strip().startswith(f"{key}  {piece}"))
    return line.split(piece, 1)[1].strip()


def whose(st):
    return {k: why for k, (_, why) in st.items()}


@pytest.mark.slow
def test_the_simulated_student_trains_on_their_kernels_to_the_reference_numbers(mine_dir, capsys):
    from course.train import fit
    X, y, Xt, yt = tiny_data()
    setup = dict(hidden=8, epochs=1, batch_size=16)
    sgd_run = fit(X, y, Xt, yt, lr=0.5, optimizer="sgd", log_every=1, progress=False, **setup)  # the course's
    ref = sgd_run["params"].flat.copy_to_host()
    st = course.use_mine()
    assert {k for k, why in whose(st).items() if why == "yours"} == {k for k in mine.PIECES if int(k.split(".")[0]) <= 6}
    assert all(why == "never checked" for k, why in whose(st).items() if int(k.split(".")[0]) >= 7)
    out = capsys.readouterr().out
    assert f"17 of {len(mine.PIECES)} pieces run your code" in out and row(out, "7.1") == "course's: never checked"
    for key in mine.trainer_keys("sgd"):  # what the course's loop asks for is the student's code, from their files
        fn = registry.pick(key, None)
        assert getattr(fn, "py_func", fn).__code__.co_filename == str(mine_dir / f"ex_{key.replace('.', '_')}.py")
        module, attr = mine._target(key)                  # and no module of the course was changed
        course_fn = getattr(module, attr)
        assert getattr(course_fn, "py_func", course_fn).__module__ == module.__name__, key
    mine_run = fit(X, y, Xt, yt, lr=0.5, optimizer="sgd", log_every=1, progress=False, **setup)
    assert mine_run["loss"] == sgd_run["loss"] and len(mine_run["loss"]) == 2
    assert np.array_equal(mine_run["params"].flat.copy_to_host(), ref)
    assert mine_run["epoch"][-1]["test_acc"] == sgd_run["epoch"][-1]["test_acc"]
    # 06's student copy ends with the report of what ran and the accuracy (its payoff cell, run as a cell)
    cell = nbtools.source(nbtools.read(nbtools.EXERCISES / "06_train.ipynb")["cells"][-1])
    run_cell(dict(course=course, sgd_run=sgd_run, best_run=mine_run), cell, "<06 payoff>")
    out = capsys.readouterr().out
    assert "12 of 12 pieces run your code" in out and row(out, "4.3") == row(out, "6.1") == "yours"
    assert f"test accuracy {sgd_run['epoch'][-1]['test_acc']:.4f}" in out                # course.runtime.mine.trained's line
    assert "every one of its 2 steps on your kernels (11 of 11 pieces yours)" in out, out
    for name in ("07_landscape.ipynb", "13_epoch.ipynb"):  # 07's and 13's last cells, the same way
        cell = nbtools.source(nbtools.read(nbtools.EXERCISES / name)["cells"][-1])
        run_cell(dict(course=course, run=mine_run, plain_run=mine_run, fused_run=mine_run, plain_s=0.5), cell,
                      f"<{name} payoff>")
    out = capsys.readouterr().out
    assert out.count("11 of 11 pieces run your code") == 2, out  # 07 and 13: training and the surfaces, the plain loop
    acc = f"test accuracy {mine_run['epoch'][-1]['test_acc']:.4f}"
    assert f"the network of the pictures: {acc}" in out and "the plain loop (49-8-10 on 32 images" in out, out
    assert "the fused epoch kernel: on the course's kernels" in out, out   # 11.1, 12.1, 12.2 not done here
    assert "every one of its 2 steps on your kernels (9 of 9 pieces yours)" in out, out  # 13 off a GPU: no acc, no ms
    mine.use_course()
    assert registry.registered() == {} and registry.pick("2.3", None) is None


@pytest.mark.parametrize("gpu", [False, True])
def test_13_payoff_prints_accuracies_and_the_epoch_time_on_a_gpu_only(gpu, monkeypatch, capsys):
    """Off a GPU 13's runs trained 16 images: the payoff says whose kernels ran, and one line points to the saved run."""
    monkeypatch.setattr(course, "SIMULATOR", not gpu)
    run = dict(setup=dict(n_in=196, hidden=8, n_train=16, batch_size=8), epoch=[dict(test_acc=0.0625)], device="cpu",
               steps=2)
    cell = nbtools.source(nbtools.read(nbtools.EXERCISES / "13_epoch.ipynb")["cells"][-1])
    run_cell(dict(course=course, plain_run=run, fused_run=run, plain_s=0.0089), cell, "<13 payoff>")
    out = capsys.readouterr().out
    assert ("test accuracy 0.0625" in out) == ("its epoch: 8.9 ms" in out) == gpu, out
    assert ("no GPU" in out) == (not gpu) and "the plain loop" in out and "every one of its 2 steps" in out, out
    assert "the fused epoch kernel: " in out and "on the course's kernels" in out, out


def test_a_solution_edited_after_passing_or_failing_its_check_is_not_used(tmp_path, monkeypatch):
    """In a real IPython shell: the hook notices a re-run exercise cell with a new source, and a failed check."""
    from IPython.core.interactiveshell import InteractiveShell
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    shell = InteractiveShell.instance()
    try:
        solutions.watch(shell)
        shell.user_ns["check_scale_kernel"] = check_scale_kernel

        def run(src):
            return shell.run_cell(src, store_history=True)

        assert run(SCALE_CELL).success and run("check_scale_kernel(scale_kernel)").success
        assert whose(mine.status(["1.2"])) == {"1.2": "yours"}
        assert run(SCALE_CELL + "\n").success  # the same cell again: still the one that passed
        assert whose(mine.status(["1.2"])) == {"1.2": "yours"}
        assert run(SCALE_CELL.replace("np.float32(255.0)", "np.float32(255)")).success  # edited, not checked
        assert whose(mine.status(["1.2"])) == {"1.2": "edited after passing"}
        assert run("check_scale_kernel(scale_kernel)").success  # checked again: used again
        assert whose(mine.status(["1.2"])) == {"1.2": "yours"}
        assert run(SCALE_CELL.replace("if i < out.size:", "if i < out.size - 1:")).success
        result = run("check_scale_kernel(scale_kernel)")
        assert isinstance(result.error_in_exec, CheckFailure)
        assert whose(mine.status(["1.2"])) == {"1.2": "check failed"}
        st = mine.use_mine(["1.2"])
        assert st["1.2"][0] is None and mine.installed() == {}
    finally:
        mine.use_course()
        InteractiveShell.clear_instance()


def test_06_payoff_counts_the_notebooks_own_train_step_and_evaluate(tmp_path, monkeypatch, capsys):
    """06's fit calls the student's train_step and evaluate (6.1, 6.2, the notebook's own cells) on every
    step, whatever use_mine() found saved: the payoff counts them as theirs (it said "0 of 9 pieces yours")."""
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    try:
        mine.use_mine(quiet=True)                        # a fresh student: nothing of 01-05 saved
        run = dict(epoch=[dict(test_acc=0.9272)], steps=937, device="cpu",
                   setup=dict(n_train=59968, n_in=784, hidden=128, batch_size=64))
        cell = nbtools.source(nbtools.read(nbtools.EXERCISES / "06_train.ipynb")["cells"][-1])
        capsys.readouterr()
        run_cell(dict(course=course, sgd_run=run, best_run=run), cell, "<06 payoff>")
        out = capsys.readouterr().out
        assert "2 of 12 pieces run your code" in out and row(out, "6.1") == row(out, "6.2") == "yours", out
        assert row(out, "2.3") == "course's: never checked", out
        assert out.count("on your kernels where they passed (2 of 11 pieces yours, the others the course's)") == 2
    finally:
        mine.use_course()


def test_report_names_a_solution_that_passed_after_use_mine(tmp_path, monkeypatch, capsys):
    """A notebook's first cell ran use_mine() before its exercise passed: report() says to call it again, not
    "never checked" under the check's own pass line."""
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    try:
        mine.use_mine(quiet=True)                       # the first cell: nothing has passed yet
        ns = {"__name__": "__main__"}
        assert run_cell(ns, SCALE_CELL, "<cell>") is None
        check_scale_kernel(ns["scale_kernel"])          # passes, and is saved
        capsys.readouterr()
        mine.report(["1.2"])
        assert row(capsys.readouterr().out, "1.2") == "course's: passed since course.use_mine() ran: call it again"
        mine.use_mine(quiet=True)
        mine.report(["1.2"])
        out = capsys.readouterr().out
        assert row(out, "1.2") == "yours"
        assert f"always the course's: {mine.ALWAYS_COURSE}" in out, out  # a run's pieces without an exercise
    finally:
        mine.use_course()


@pytest.mark.slow
def test_never_checked_and_dependencies_say_why(mine_dir, capsys):
    solutions.mark_edited("2.2")  # tile_dot's cell changed: the linear kernel that calls it is not used either
    os.remove(mine_dir / "ex_4_2.json")  # never checked
    st = whose(mine.status())
    assert st["2.2"] == "edited after passing"
    assert st["2.3"] == "uses tile_dot of exercise 2.2: edited after passing"
    assert st["4.2"] == "never checked" and st["4.1"] == "yours"
    solutions.mark_failed("Exercise 3.2")
    assert whose(mine.status())["3.3"] == "uses sum_kernel of exercise 3.2: check failed"
    text = (mine_dir / "ex_5_1.py").read_text()
    (mine_dir / "ex_5_1.py").write_text(text.replace("lr * g[i]", "lr * g[i] * 2"))  # the saved file tampered
    assert whose(mine.status(["5.1"]))["5.1"].startswith("cannot load: CaptureError: ex_5_1.py was changed")
    mine.use_mine()
    out = capsys.readouterr().out
    assert row(out, "2.3") == "course's: uses tile_dot of exercise 2.2: edited after passing"
    assert row(out, "4.2") == "course's: never checked" and row(out, "4.1") == "yours"


@pytest.mark.slow
def test_a_notebook_saved_with_a_different_cell_counts_as_edited(mine_dir):
    rec = mine.read_record("1.2")
    nb = nbtools.read(nbtools.EXERCISES / "01_data.ipynb")
    cell = next(c for c in nb["cells"] if c["cell_type"] == "code" and "# Exercise 1.2" in nbtools.source(c))
    cell["source"] = rec["cell"]  # the student's notebook as it was when the check passed
    path = mine_dir.parent / "01_data.ipynb"
    path.write_text(nbtools.dumps(nb))
    assert whose(mine.status(["1.2"])) == {"1.2": "yours"}
    cell["source"] = rec["cell"].replace("np.float32(255.0)", "np.float32(255)")
    path.write_text(nbtools.dumps(nb))
    assert whose(mine.status(["1.2"])) == {"1.2": "edited after passing"}
    os.utime(path, (rec["time"] - 10, rec["time"] - 10))  # saved before the pass: the pass is newer
    assert whose(mine.status(["1.2"])) == {"1.2": "yours"}


def test_no_student_work_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    import course.scale
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "nothing"))
    st = course.use_mine()
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("course.use_mine(): no passing solutions of yours in")
    assert all(fn is None and why == "never checked" for fn, why in st.values())
    mine.report()
    assert f"0 of {len(mine.PIECES)} pieces run your code" in capsys.readouterr().out
    monkeypatch.setenv("COURSE_MINE_DIR", "off")  # nothing saved, nothing used
    check_scale_kernel(course.scale.scale_kernel)
    assert run_cell(ns := {"__name__": "__main__"}, SCALE_CELL, "<cell>") is None
    check_scale_kernel(ns["scale_kernel"])
    assert not os.path.exists("off") and not (tmp_path / "nothing").exists()
    course.use_mine()
    assert capsys.readouterr().out.endswith("course.use_mine(): COURSE_MINE_DIR=off: the course's kernels run "
                                            "everywhere\n")


@pytest.mark.slow
def test_train_mine_on_the_command_line(mine_dir, monkeypatch, capsys, tmp_path):
    """`train --mine` with the student's work, then with none (one line, the course's kernels)."""
    import course.data
    from course.__main__ import main
    X, y, Xt, yt = (a[:16] for a in course.data.load_mnist())
    monkeypatch.setattr(course.data, "load_mnist", lambda root=None, dataset=None: (X, y, Xt, yt))
    args = ["train", "--mine", "--quick", "--epochs", "1", "--batch-size", "16", "--hidden", "8"]
    assert main(args + ["--out", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("--mine: 12 of 12 pieces run your code")
    assert "always the course's: gather of the labels" in out and "test accuracy: " in out
    assert set(json.loads((tmp_path / "r.json").read_text())["mine"].values()) == {"yours"}
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "none"))
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("--mine: no passing solutions of yours in") and out.count("--mine") == 1
    assert "pieces run your code" not in out and "test accuracy: " in out


@pytest.mark.slow
def test_the_course_s_own_solutions_and_unsaveable_ones_are_not_recorded(tmp_path, monkeypatch, capsys):
    import course.scale
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    check_scale_kernel(course.scale.scale_kernel)  # the course's kernel (tests of the checks do this)
    check_scale_kernel(scale_in_a_file)  # a kernel from a .py file
    ns = {"__name__": "__main__"}
    src = SCALE_CELL.replace("    i = cuda.grid(1)", "    ### BEGIN SOLUTION\n    i = cuda.grid(1)")
    run_cell(ns, src, "<a solution notebook's cell>")
    check_scale_kernel(ns["scale_kernel"])  # a teacher's solution notebook
    ns = {"__name__": "__main__", "DIVISOR": np.array([255.0], np.float32)}
    run_cell(ns, SCALE_CELL.replace("np.float32(255.0)", "DIVISOR[0]"), "<a cell>")
    check_scale_kernel(ns["scale_kernel"])
    assert "not saved for course.use_mine(): it uses `DIVISOR` (ndarray) from the notebook" in capsys.readouterr().out
    assert not (tmp_path / "mine").exists()
    ns = {"__name__": "__main__", "SCALE": np.float32(1 / 255)}  # a numpy number is written down as one
    run_cell(ns, SCALE_CELL.replace("x[i] / np.float32(255.0)", "x[i] * SCALE"), "<another cell>")
    check_scale_kernel(ns["scale_kernel"])
    assert f"SCALE = numpy.float32({float(np.float32(1 / 255))!r})" in (tmp_path / "mine" / "ex_1_2.py").read_text()
    assert whose(mine.status(["1.2"])) == {"1.2": "yours"}


def test_in_a_notebook_a_check_of_the_course_s_own_function_is_no_pass(tmp_path, monkeypatch, capsys):
    """The check cell run before the exercise cell: a star import's kernel is the course's, not the student's."""
    import course.checks.core
    import course.scale
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    monkeypatch.setattr(course.checks.core, "in_notebook", lambda: True)
    with pytest.raises(CheckFailure, match="Exercise 1.2 not checked: this scale_kernel is the course's own, from "
                       "course.scale, not yours: run your exercise cell, then this check"):
        check_scale_kernel(course.scale.scale_kernel)
    assert "✓" not in capsys.readouterr().out
    assert not (tmp_path / "mine").exists()
    ns = {"__name__": "__main__"}
    run_cell(ns, SCALE_CELL, "<a cell>")
    check_scale_kernel(ns["scale_kernel"])  # the student's own, typed in a cell: a pass
    assert "✓ Exercise 1.2 passed" in capsys.readouterr().out


def test_student_copies_call_use_mine_and_06_07_13_end_with_the_payoff():
    for path in sorted(nbtools.EXERCISES.glob("*.ipynb")):
        cells = nbtools.read(path)["cells"]
        first = next(nbtools.source(c) for c in cells if c["cell_type"] == "code")
        assert ("course.use_mine()" in first) == (path.name >= "03"), path.name
        assert first.startswith(colab.cell_block() + "\nimport course"), path.name  # the Colab block, then course
        assert ("course.runtime.mine.report(" in nbtools.source(cells[-1])) == (path.name in nbtools.MINE_PAYOFF), path.name
        again = nbtools.add_mine_cells(nbtools.read(path), path.name)  # applied twice, it changes nothing
        assert nbtools.dumps(again) == path.read_text(encoding="utf-8")
    for path in nbtools.solution_notebooks():  # the solution notebooks are left as they are
        assert "use_mine" not in json.dumps(nbtools.read(path)["cells"][:3])


@pytest.mark.slow
def test_in_a_jupyter_kernel_a_pass_is_saved_and_an_edit_noticed(tmp_path, monkeypatch):
    """The only test here that starts a kernel: ipykernel's cells, its linecache names and the hook, for real."""
    import nbformat
    from nbclient import NotebookClient
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    cells = ["import course\nfrom course.checks.data import check_scale_kernel", SCALE_CELL,
             "check_scale_kernel(scale_kernel)", "from course.runtime import mine\nprint(mine.status(['1.2'])['1.2'][1])",
             SCALE_CELL.replace("np.float32(255.0)", "np.float32(255)"), "course.use_mine(['1.2'])"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    out = ["".join(o.get("text", "") for o in c.outputs) for c in nb.cells]
    assert "✓ Exercise 1.2 passed" in out[2] and "saved for course.use_mine()" in out[2]
    assert out[3].strip() == "yours"
    assert "course's: edited after passing" in out[5]
    assert "def scale_kernel(x, out):" in (tmp_path / "mine" / "ex_1_2.py").read_text()


COMPILE_SAVED = r'''
import importlib.util, sys
sys.path.insert(0, sys.argv[2])  # tests/: simulated_student
from simulated_student import run_cell
import course
from course.runtime import mine, solutions
from course.tools import nbtools
from course.tools.compile import CC
from course.tools.signatures import all_signatures
import numba.cuda.dispatcher as dispatcher
from numba import cuda, types


class NoDevice:  # as course.tools.compile: device functions ask the current device for its compute capability
    compute_capability = CC


dispatcher.get_current_device = NoDevice
names = {n: getattr(types, n) for n in dir(types) if not n.startswith("_")}
sigs, n = all_signatures(), 0
for path in nbtools.solution_notebooks()[:5]:
    ns = {"__name__": "__main__"}
    cells = [c for c in nbtools.read(path)["cells"] if c["cell_type"] == "code"]
    for i, cell in enumerate(cells):
        src = nbtools.source(cell)
        if any(d == "export" for d, _ in nbtools.directives(src)):
            run_cell(ns, nbtools._strip(src), f"<{path.stem} cell {i}>")
    for key, (_, target) in mine.PIECES.items():
        if int(key.split(".")[0]) == int(path.name[:2]) and target in sigs:
            name = target.split(":")[1]
            text, _ = solutions.capture(ns[name])
            file = f"{sys.argv[1]}/ex_{key.replace('.', '_')}.py"
            open(file, "w").write(text)
            spec = importlib.util.spec_from_file_location(f"saved_{n}", file)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            for sig in sigs[target]:
                cuda.compile_ptx(getattr(module, name).py_func, eval(f"({sig},)", {}, names), cc=CC)
                n += 1
print("compiled", n)
'''


@pytest.mark.slow
def test_saved_kernels_compile_for_a_real_gpu(tmp_path):
    """What use_mine() loads on a GPU (a real dispatcher's globals, not the simulator's) compiles to sm_90 PTX."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", COMPILE_SAVED, str(tmp_path), os.path.dirname(__file__)], capture_output=True, text=True,
                       timeout=900, env={**os.environ, "COURSE_DEVICE": "gpu", "NUMBA_ENABLE_CUDASIM": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert int(r.stdout.split("compiled")[1]) >= 20, r.stdout
    assert "def tile_dot(" in (tmp_path / "ex_2_3.py").read_text()


def test_only_a_solution_with_the_course_s_signature_replaces_it(tmp_path, monkeypatch):
    from course.checks.landscape import check_project_to_plane
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    cells = nbtools.read(nbtools.NOTEBOOKS / "07_landscape.ipynb")["cells"]
    cell = nbtools._strip(next(nbtools.source(c) for c in cells
                               if c["cell_type"] == "code" and "# Exercise 7.2" in nbtools.source(c)))
    ns = {"__name__": "__main__", "np": np}  # the notebook imported numpy in an earlier cell
    run_cell(ns, cell.replace("theta_n, d1, d2):", "theta_n, d1, d2, unused=None):"), "<07 cell>")
    check_project_to_plane(ns["project_to_plane"])  # it passes, with one parameter more than the course's
    assert whose(mine.status(["7.2"])) == {"7.2": "its signature differs from the course's"}
    run_cell(ns, cell, "<07 cell, fixed>")
    check_project_to_plane(ns["project_to_plane"])
    assert whose(mine.status(["7.2"])) == {"7.2": "yours"}


@pytest.mark.slow
def test_passing_fused_pieces_run_in_the_fused_epoch_kernel(tmp_path, monkeypatch):
    """Exercises 11.1, 12.1 and 12.2 join use_mine(): the passing tile_origin, halve and warp_class_sums are saved,
    use_mine() puts them into course.fused, the fused epoch kernel trains with them (the same losses and parameters
    as the course's own), and use_course() takes them out."""
    from numba import cuda

    import course.fused as fused
    from course.checks.fused import check_halve, check_tile_origin, check_warp_class_sums
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    X, y, Xt, yt = tiny_data()
    setup = dict(hidden=8, epochs=1, batch_size=16, lr=0.5, mode="epoch", progress=False)
    ref = fused.fit_fused(X, y, Xt, yt, **setup)
    names = ("tile_origin", "halve", "warp_class_sums")
    originals = {name: getattr(fused, name) for name in names}
    ns = {"__name__": "__main__", "cuda": cuda, "shfl_xor": fused.shfl_xor, "TJ": fused.TJ, "TK": fused.TK}
    for nb, label, name, check in (("11_fused", "# Exercise 11.1", "tile_origin", check_tile_origin),
                                   ("12_kernel", "# Exercise 12.1", "halve", check_halve),
                                   ("12_kernel", "# Exercise 12.2", "warp_class_sums", check_warp_class_sums)):
        cells = nbtools.read(nbtools.NOTEBOOKS / f"{nb}.ipynb")["cells"]   # what the notebooks imported before
        cell = nbtools._strip(next(nbtools.source(c) for c in cells
                                   if c["cell_type"] == "code" and label in nbtools.source(c)))
        run_cell(ns, cell, f"<{nb} cell {name}>")
        check(ns[name])
    try:
        assert whose(mine.use_mine(["11.1", "12.1", "12.2"], quiet=True)) == {"11.1": "yours", "12.1": "yours",
                                                                              "12.2": "yours"}
        kernel = fused.with_yours(fused.fused_steps_kernel)   # the launches' kernel: a copy calling theirs
        assert kernel is not fused.fused_steps_kernel and fused.with_yours(fused.fused_steps_kernel) is kernel
        for name, key in zip(names, ("11.1", "12.1", "12.2")):
            got = kernel.py_func.__globals__[name]
            assert got is registry.pick(key, None), name
            assert got.py_func.__code__.co_filename == str(tmp_path / "mine" / f"ex_{key.replace('.', '_')}.py")
        assert {name: getattr(fused, name) for name in names} == originals   # course.fused itself unchanged
        got = fused.fit_fused(X, y, Xt, yt, **setup)
    finally:
        mine.use_course()
    assert fused.with_yours(fused.fused_steps_kernel) is fused.fused_steps_kernel
    assert np.allclose(got["loss"], ref["loss"], atol=1e-6) and len(got["loss"]) == 2
    for k in ("W1", "b1", "W2", "b2"):
        assert np.allclose(got["params"][k].copy_to_host(), ref["params"][k].copy_to_host(), atol=1e-6), k


def test_passing_clock_functions_feed_the_clock_report(tmp_path, monkeypatch):
    """Exercises 13.1 and 13.2 join use_mine(): the passing part_us and barrier_us are saved, use_mine() puts them
    into course.epoch, where clock_report calls them (the same report), and use_course() takes them out."""
    import course.epoch as epoch
    from course.checks.epoch import check_barrier_us, check_part_us, clock_table
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    cells = nbtools.read(nbtools.NOTEBOOKS / "13_epoch.ipynb")["cells"]
    ns = {"__name__": "__main__", "np": np}                       # what the notebook imported before
    for label, check, name in (("# Exercise 13.1", check_part_us, "part_us"),
                               ("# Exercise 13.2", check_barrier_us, "barrier_us")):
        cell = nbtools._strip(next(nbtools.source(c) for c in cells
                                   if c["cell_type"] == "code" and label in nbtools.source(c)))
        run_cell(ns, cell, f"<12 cell {name}>")
        check(ns[name])
    T = clock_table(np.random.default_rng(1), 30, 132)
    ref = epoch.clock_report(T, 128, 64)
    originals = epoch.part_us, epoch.barrier_us
    calls = []

    def counted(fn):
        """fn, noting each call: the student's function, as registered, seen being called."""
        return lambda *a: calls.append(fn.__name__) or fn(*a)

    try:
        assert whose(mine.use_mine(["13.1", "13.2"], quiet=True)) == {"13.1": "yours", "13.2": "yours"}
        assert registry.pick("13.1", None).__code__.co_filename == str(tmp_path / "mine" / "ex_13_1.py")
        assert epoch.clock_report(T, 128, 64) == ref
        for key in ("13.1", "13.2"):
            registry.register(key, counted(registry.pick(key, None)))
        epoch.clock_report(T, 128, 64)
        assert set(calls) == {"part_us", "barrier_us"}, calls      # clock_report asked the registry for both
    finally:
        mine.use_course()
    assert (epoch.part_us, epoch.barrier_us) == originals            # course.epoch itself never changed


def test_checks_names_the_check_of_every_piece():
    """mine.CHECKS (exercise -> the check whose pass saves it) agrees with the checks' own numbers."""
    from conftest import registered_checks
    registered = {n: check.__name__ for n, (_, check) in registered_checks().items() if n in mine.PIECES}
    assert registered == mine.CHECKS


def test_a_record_saved_under_an_exercise_s_old_number_is_not_installed(tmp_path, monkeypatch):
    """Exercise 12.1 was part_us before notebook 11 was split; it is now halve, with as many parameters. A passed
    record of the old 12.1 must not be put into the fused kernel as halve: it names another check."""
    from course.checks.epoch import check_part_us
    monkeypatch.setenv("COURSE_MINE_DIR", str(tmp_path / "mine"))
    cells = nbtools.read(nbtools.NOTEBOOKS / "13_epoch.ipynb")["cells"]
    cell = nbtools._strip(next(nbtools.source(c) for c in cells
                               if c["cell_type"] == "code" and "# Exercise 13.1" in nbtools.source(c)))
    ns = {"__name__": "__main__", "np": np}
    run_cell(ns, cell, "<13 cell>")
    check_part_us(ns["part_us"])
    assert whose(mine.status(["13.1"])) == {"13.1": "yours"}
    d = tmp_path / "mine"
    shutil.copy(d / "ex_13_1.py", d / "ex_12_1.py")                   # as the old numbering saved it
    rec = json.loads((d / "ex_13_1.json").read_text())
    rec["exercise"] = "12.1"
    rec["functions"]["part_us"]["exercise"] = "12.1"
    (d / "ex_12_1.json").write_text(json.dumps(rec))
    fn, why = mine.status(["12.1"])["12.1"]
    assert fn is None and why.startswith("saved by check_part_us, not check_halve"), why
