"""The student copies (notebooks/exercises/): what the generator writes into them, and that they run.

Fast tests (no kernel): saved GPU outputs carried as markdown, no empty or directive cells, the format Jupyter
writes, solutions pasted back by exercise label, and a copy with its solutions holding its solution notebook's code
cell for cell. Slow tests (a Jupyter kernel): each copy stops at its first exercise, and (SLOW: about as long as
running every notebook, ~10 min on 2 cores) each copy with every solution pasted back runs to the end, 01 to 14 on
one worker (a file's tests share one: conftest.py), the passes it saves used by the use_mine payoffs of the later
ones (06, 07, 13); 06 learns. That run is also the solution notebook's: its cells marked `# NBVAL_CHECK_OUTPUT` must print what the saved GPU
run printed, as nbval checks them (`pytest` runs no notebook twice; `pytest notebooks/NN_topic.ipynb` runs nbval)."""

import copy
import re

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from course.tools import nbtools

STUDENT = sorted(nbtools.EXERCISES.glob("*.ipynb"))
CHECK_OUTPUT = "# NBVAL_CHECK_OUTPUT"  # a solution notebook's cell whose printed output must match the saved run's
NOT_COMPARED = ("image/png", "image/jpeg")  # as nbval (without nbdime) compares outputs
CR_RE = re.compile(r"^.*\r(?=[^\n])", re.M)  # a line a carriage return wrote over, as nbval drops it
DISCUSSED = ["02_forward", "03_loss", "05_update", "06_train", "07_landscape", "08_time", "10_phases", "12_kernel", "13_epoch",
             "14_race", "15_matmul"]


def first_exercise(path):
    for cell in nbtools.read(nbtools.NOTEBOOKS / path.name)["cells"]:
        src = nbtools.source(cell)
        if cell["cell_type"] == "code" and nbtools.BEGIN in src:
            return nbtools.EXERCISE_RE.search(src).group(1)


def shown_cells(nb):
    """The code cells of a solution notebook marked `# SHOW_SAVED`."""
    return [c for c in nb["cells"] if c["cell_type"] == "code"
            and nbtools.SHOW_SAVED in nbtools.source(c).splitlines()]


def test_there_is_a_student_copy_of_every_notebook():
    assert [p.name for p in STUDENT] == [p.name for p in nbtools.solution_notebooks()]


@pytest.mark.parametrize("name", DISCUSSED)
def test_student_copy_carries_the_saved_gpu_outputs_the_text_discusses(name):
    solution = nbtools.read(nbtools.NOTEBOOKS / f"{name}.ipynb")
    student = nbtools.read(nbtools.EXERCISES / f"{name}.ipynb")
    shown = shown_cells(solution)
    assert shown, f"{name}: no cell marked {nbtools.SHOW_SAVED}"
    ids = [c.get("id") for c in student["cells"]]
    device = nbtools.saved_device(solution)
    assert device in ("NVIDIA H200", "NVIDIA H100 80GB HBM3")  # committed GPU runs: an H200's, 02's and 14's an H100's
    for cell in shown:
        i = ids.index(cell["id"])
        saved = student["cells"][i + 1]                      # right after the (output-less) code cell
        assert saved["cell_type"] == "markdown" and saved["id"] == f"{cell['id']}-saved"
        text = nbtools.source(saved)
        assert text.startswith(f"**Saved on an {device}**")
        for line in nbtools.saved_text(cell).splitlines():  # every printed line, verbatim
            assert line in text, (cell["id"], line)
        images = nbtools.saved_images(cell)
        assert [v["image/png"] for v in saved.get("attachments", {}).values()] == images
        assert text.count("](attachment:") == len(images)
        assert "\r" not in text


def test_saved_output_cell_comes_from_the_saved_run_not_from_typed_text():
    nb = nbtools.read(nbtools.NOTEBOOKS / "02_forward.ipynb")
    cell = next(c for c in shown_cells(nb) if nbtools.saved_text(c))
    before = nbtools.source(nbtools.saved_output_cell(cell, "GPU X"))
    changed = copy.deepcopy(cell)
    out = next(o for o in changed["outputs"] if o.get("name") == "stdout")
    out["text"] = ["42.00 TFLOP/s, measured\n"]
    after = nbtools.source(nbtools.saved_output_cell(changed, "GPU X"))
    assert "42.00 TFLOP/s, measured" in after and after != before and after.startswith("**Saved on an GPU X**")
    changed["outputs"] = []
    with pytest.raises(ValueError, match="printed and drew nothing"):
        nbtools.saved_output_cell(changed, "GPU X")


def test_saved_text_keeps_stdout_and_drops_progress_bars():
    cell = {"outputs": [{"output_type": "stream", "name": "stderr", "text": "epoch 1/3: 100%|###|\r"},
                        {"output_type": "stream", "name": "stdout", "text": "a 1.0 ms\n\nb\r50%\rb 2.0 ms\n"}]}
    assert nbtools.saved_text(cell) == "a 1.0 ms\nb 2.0 ms"


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.name)
def test_student_copy_is_clean_and_written_as_jupyter_writes_it(path):
    text = path.read_text(encoding="utf-8")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nbformat.writes(nb) + "\n" == text, "Jupyter would rewrite this file on its first save"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.source.strip(), f"{path.name}: an empty code cell"
            assert not re.search(r"^\s*#\|", cell.source, re.M), f"{path.name}: a `#|` directive left in"
            assert nbtools.SHOW_SAVED not in cell.source and not cell.outputs


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.name)
def test_student_copy_has_no_cell_that_only_echoes_a_string(path):
    """A code cell holding only a string (a module's docstring, once its `#| export` line is stripped) echoes it
    when run, and asks nothing of the student (14_race's r_e1x did: a fresh student's report); a module's docstring
    goes atop its first exported cell with code."""
    import ast
    for cell in nbtools.read(path)["cells"]:
        if cell["cell_type"] == "code":
            body = ast.parse(nbtools.source(cell)).body
            assert not (body and all(isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) for s in body)), (
                f"{path.name} cell {cell.get('id')}: only a string:\n{nbtools.source(cell)}")


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.name)
def test_student_copy_imports_hint_where_it_imports_the_checks(path):
    """A failing check ends with `hint('N.M')`: the cell that imports the checks imports hint too."""
    cells = [nbtools.source(c) for c in nbtools.read(path)["cells"] if c["cell_type"] == "code"]
    importing = [s for s in cells if re.search(r"^from course\.checks\.\w+ import", s, re.M)]
    assert importing, f"{path.name}: no cell imports a check"
    for src in importing:
        assert re.search(r"^from course\.checks import hint\b", src, re.M), f"{path.name}: hint is not imported"


# Where "simulator" in prose is about the simulator itself (it runs the checks, COURSE_DEVICE=sim, 03's race,
# fallbacks): a sentence naming it names one of these; otherwise it means what runs without a GPU, the executor.
SIMULATOR_CONTEXT = re.compile(r"COURSE_DEVICE=sim|simulator alone|check|executor|simulating|race|thread order|"
                               r"syncthreads|barrier|fit_sim|shuffle|IndexError", re.I)


def simulator_sentences(nb):
    """Markdown sentences that say "simulator" with nothing that makes it the simulator rather than the executor."""
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            text = " ".join(nbtools.source(cell).split())
            for sentence in re.split(r"(?<=[.:;])\s+(?=[A-Z(`])|(?<=;)\s+", text):  # a clause after ";" too
                if re.search("simulator", sentence, re.I) and not SIMULATOR_CONTEXT.search(sentence):
                    yield cell.get("id"), sentence


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.name)
def test_prose_calls_the_executor_what_it_is(path):
    """Without a GPU the CPU executor runs the notebooks' kernels: no sentence says "the simulator" for it, and the
    first cell's comment names the executor."""
    nb = nbtools.read(path)
    assert not list(simulator_sentences(nb)), list(simulator_sentences(nb))
    first = next(nbtools.source(c) for c in nb["cells"] if c["cell_type"] == "code" and "import course" in nbtools.source(c))
    assert "simulator" not in first.split("import course", 1)[1].splitlines()[0] and "executor" in first, first


def test_the_simulator_scan_catches_the_old_sentences():
    """The scan above flags the sentences a fresh student found (the executor called the simulator)."""
    old = ["In the simulator we take only a few images: it runs about 5,000 GPU threads per second.",
           "On the GPU we use all 60,000 training images; in the simulator a few hundred.",
           "(The same problem runs on the GPU and in the simulator; only the number of steps differs.)",
           "The simulator has no warp shuffles, so the measurement runs only on a GPU; in the simulator it says so."]
    nb = {"cells": [{"cell_type": "markdown", "id": str(k), "source": s} for k, s in enumerate(old)]}
    assert len(list(simulator_sentences(nb))) == len(old)
    nb["cells"][0]["source"] = "In the simulator alone (`COURSE_DEVICE=sim`) we take a few images."
    assert len(list(simulator_sentences(nb))) == len(old) - 1


def test_race_module_keeps_its_docstring_from_the_exercise_cell():
    """14_race's docstring moved into the exercise cell r_e1s (above `# Exercise 14.1`): course/race.py still opens
    with it, and the exercise machinery still finds the exercise there."""
    import course.race
    assert course.race.__doc__.startswith("The race's clock (notebook 14)")
    cell = next(c for c in nbtools.read(nbtools.NOTEBOOKS / "14_race.ipynb")["cells"] if c.get("id") == "r_e1s")
    assert nbtools.exercise_label(nbtools.source(cell)) == "Exercise 14.1"


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.name)
def test_student_copy_with_solutions_is_the_solution_code(path):
    nb = nbtools.student_copy_with_solutions(path)
    solved = [c for c in nb.cells if c.cell_type == "code" and nbtools.exercise_label(c.source)]
    assert solved and all("NotImplementedError(\"Exercise" not in c.source for c in solved)
    want = {nbtools.exercise_label(nbtools.source(c)): nbtools._strip(nbtools.source(c))
            for c in nbtools.read(nbtools.NOTEBOOKS / path.name)["cells"]
            if c["cell_type"] == "code" and nbtools.BEGIN in nbtools.source(c)}
    assert {nbtools.exercise_label(c.source): c.source for c in solved} == want


def test_student_copy_with_solutions_refuses_a_missing_solution(tmp_path, monkeypatch):
    (tmp_path / "exercises").mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        '# Exercise 9.1: a\n# YOUR CODE HERE\nraise NotImplementedError("Exercise 9.1: a")')])
    nbformat.write(nb, tmp_path / "exercises" / "09_x.ipynb")
    nbformat.write(nbformat.v4.new_notebook(), tmp_path / "09_x.ipynb")
    monkeypatch.setattr(nbtools, "NOTEBOOKS", tmp_path)
    monkeypatch.setattr(nbtools, "EXERCISES", tmp_path / "exercises")
    with pytest.raises(ValueError, match="Exercise 9.1 has no solution"):
        nbtools.student_copy_with_solutions("09_x.ipynb")


def test_bench_table_shows_in_the_student_copy_of_13():
    """14's benchmark cell finds notebooks/results/bench-*.json when run from notebooks/exercises/."""
    cells = nbformat.read(nbtools.EXERCISES / "14_race.ipynb", as_version=4).cells
    bench = next(c for c in cells if c.cell_type == "code" and "bench-*.json" in c.source)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import json\nimport matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nimport course\n"
        "from course.tools.nbtools import NOTEBOOKS"), bench])
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(nbtools.EXERCISES)}}).execute()
    out = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert "NVIDIA H" in out and "test acc" in out and "yet" not in out, out   # the GPU it ran on, named


def test_01_unsolved_1_1_falls_back_to_the_courses_parser(capsys):
    """with 1.1 left unwritten, the cell after its check puts the course's parse_idx_header in its place
    (one line says so), so 01's later cells still read the files; once the student's is written it stays theirs."""
    import course.data
    from simulated_student import run_cell
    cells = [c for c in nbtools.read(nbtools.EXERCISES / "01_data.ipynb")["cells"] if c["cell_type"] == "code"]
    upto = [c for c in cells[:[c["id"] for c in cells].index("c011") + 1] if c["id"] != "c010"]  # the check aside
    ns = {"__name__": "__main__"}
    for cell in upto:
        run_cell(ns, nbtools.source(cell), f"<01 {cell['id']}>")
    assert ns["parse_idx_header"] is course.data.parse_idx_header
    assert "1.1 not written yet" in capsys.readouterr().out
    mine = {"__name__": "__main__", "parse_idx_header": lambda buf: None, "is_stub": ns["is_stub"]}
    run_cell(mine, nbtools.source(next(c for c in cells if c["id"] == "c010f")), "<01 c010f>")
    assert mine["parse_idx_header"] is not course.data.parse_idx_header and capsys.readouterr().out == ""


def run_student(path, notebook):
    client = NotebookClient(notebook, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(nbtools.EXERCISES)}})
    client.execute()
    return notebook


@pytest.mark.slow
@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.name)
def test_student_notebook_stops_at_first_exercise(path):
    nb = nbformat.read(path, as_version=4)
    with pytest.raises(CellExecutionError) as e:
        run_student(path, nb)
    label = first_exercise(path)
    assert e.value.ename == "NotImplementedError", e.value
    assert label in e.value.evalue, (label, e.value.evalue)
    errors = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
              and any(o.get("output_type") == "error" for o in c.outputs)]
    assert len(errors) == 1
    before = "".join(c.source for c in nb.cells[:errors[0] + 1] if c.cell_type == "code")
    assert label in before, "the error came before the first exercise's cell"


def printed(nb):
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.get("name") == "stdout")


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.name)
def test_student_copy_with_solutions_runs_the_solution_notebooks_code(path):
    """Past its first code cell (the Colab block and `course.use_mine()` added) and the payoff cells, a copy with its
    solutions holds the solution notebook's code cells, in order: running it runs the solution notebook."""
    code = lambda cells: [(c["id"], nbtools._strip(nbtools.source(c))) for c in cells if c["cell_type"] == "code"]
    solution = [(i, src) for i, src in code(nbtools.read(nbtools.NOTEBOOKS / path.name)["cells"]) if src.strip()]
    student = code(nbtools.student_copy_with_solutions(path).cells)
    assert student[0][0] == solution[0][0] and solution[0][1].strip() in student[0][1], path.name
    assert [c for c in student[1:] if c[0] != "mine-run"] == solution[1:], path.name


def compared(outputs):
    """What nbval compares of a cell's outputs: each stream's text, each result's data but images, the errors."""
    out = {}
    for o in outputs:
        if o["output_type"] == "stream":
            out[o["name"]] = out.get(o["name"], "") + "".join(o["text"])
        elif o["output_type"] == "error":
            out.setdefault("error", []).append((o["ename"], o["evalue"]))
        else:
            for mime, value in o.get("data", {}).items():
                if mime not in NOT_COMPARED:
                    out.setdefault(mime, []).append("".join(value))
    return {k: CR_RE.sub("", v) if isinstance(v, str) else v for k, v in out.items()}


def prints_what_the_saved_run_printed(path, nb):
    """Each cell the solution notebook marks `# NBVAL_CHECK_OUTPUT` printed in `nb` (its student copy, run) what the
    saved GPU run printed."""
    ran = {c.get("id"): c for c in nb.cells}
    for cell in nbtools.read(nbtools.NOTEBOOKS / path.name)["cells"]:
        if cell["cell_type"] == "code" and CHECK_OUTPUT in nbtools.source(cell).splitlines():
            assert compared(ran[cell["id"]].outputs) == compared(cell["outputs"]), (path.name, cell["id"])


def test_a_marked_cell_that_prints_otherwise_fails():
    """The comparison above, on 01's first marked cell: its saved outputs pass; a changed line, an extra stream or
    a missing output fail."""
    path = nbtools.NOTEBOOKS / "01_data.ipynb"
    saved = nbformat.read(path, as_version=4)
    cell = next(c for c in saved.cells if c.cell_type == "code" and CHECK_OUTPUT in c.source.splitlines())
    prints_what_the_saved_run_printed(path, saved)
    for change in (lambda o: o[0].update(text=o[0]["text"] + "1"), lambda o: o.append(nbformat.v4.new_output(
            "stream", name="stderr", text="a warning\n")), lambda o: o.clear()):
        changed = copy.deepcopy(saved)
        change(next(c for c in changed.cells if c.get("id") == cell.id).outputs)
        with pytest.raises(AssertionError):
            prints_what_the_saved_run_printed(path, changed)


@pytest.mark.slow
@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.name)
def test_student_notebook_with_solutions_runs_to_the_end(path):
    """SLOW (the whole notebook in the simulator: 1-2 minutes each): a student who solves every exercise gets
    through the notebook, every check passing, each marked cell printing what the saved run printed; in 06 the
    network learns."""
    nb = run_student(path, nbtools.student_copy_with_solutions(path))
    prints_what_the_saved_run_printed(path, nb)
    text = printed(nb)
    labels = sorted({nbtools.exercise_label(c.source) for c in nb.cells if c.cell_type == "code"} - {None})
    for label in labels:
        assert f"✓ {label} passed" in text, label
    if path.name == "06_train.ipynb":
        first, last = map(float, re.search(r"training loss: first logged ([\d.]+), mean of the last five ([\d.]+)",
                                           text).groups())
        assert last < first / 2, (first, last)                 # the curve falls
        accuracies = [float(a) for a in re.findall(r"^test accuracy: ([\d.]+)$", text, re.M)]
        assert len(accuracies) == 2 and min(accuracies) >= 0.85, accuracies
    if path.name in ("06_train.ipynb", "07_landscape.ipynb"):   # 06's fit ran the notebook's train_step, evaluate
        labels_tell_the_truth(text, own=("6.1", "6.2") if path.name == "06_train.ipynb" else ())


WHERE = {"cpu": "on the CPU executor", "sim": "in numba's CUDA simulator", "gpu": "on the GPU"}
TRAINED_RE = re.compile(r"^(.+): test accuracy ([\d.]+) \((\d+)-(\d+)-10 on ([\d,]+) images, (\d+) epochs? of batch "
                        r"(\d+)\): (.+)$", re.M)


def labels_tell_the_truth(text, own=()):
    """The payoff's lines (course.runtime.mine.trained) say whose kernels trained the network, where, at which sizes; they
    agree with the table printed above them, and nothing calls the NumPy twin's result the student's."""
    import os
    assert "the network you trained" not in text          # the old label, true only on a GPU
    from course.runtime import mine
    assert re.search(r"\d+ of \d+ pieces run your code", text), "no table of whose kernels ran"
    rows = dict(re.findall(r"^  (\d+\.\d+)  .{36} (yours|course's)", text, re.M))   # the table: piece -> whose
    kernels = set(mine.STEP_PIECES) | set(mine.UPDATE.values()) | set(own)          # what a training step runs
    yours = sum(rows.get(k) == "yours" for k in kernels)
    lines = TRAINED_RE.findall(text)
    assert lines, "no line saying what trained the network"
    import course
    want = os.environ.get("COURSE_DEVICE", "auto")           # what the notebook's kernel chose: as `import course`
    if want not in ("sim", "gpu", "cpu"):
        want = "cpu" if course.SIMULATOR else "gpu"
    for name, acc, n_in, hidden, n_train, epochs, batch, how in lines:
        if want == "sim":
            assert "NumPy twin" in how and (WHERE["sim"] in how or "not by kernels" in how), how
        else:
            assert how.startswith("every one of its") and WHERE[want] in how, how
            assert n_in == "784" and int(n_train.replace(",", "")) > 59_900, (n_in, n_train)  # all full batches
        if "NumPy twin" not in how or "steps 1-" in how:
            assert ("your kernels" in how) == (yours > 0) and ("the course's kernels" in how) == (yours == 0), how


def test_the_label_scan_catches_a_false_label(monkeypatch):
    """labels_tell_the_truth, on lines course.runtime.mine.trained writes: a true one passes; whose, where or the sizes
    changed, or the old "the network you trained", fails."""
    from course.runtime import mine, registry
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    keys = mine.step_pieces("sgd")
    monkeypatch.setattr(registry, "_CHOSEN", {k: None for k in keys})
    run = dict(epoch=[dict(test_acc=0.9272)], steps=937, device="cpu",
               setup=dict(n_train=59968, n_in=784, hidden=128, batch_size=64))
    table = mine.table({k: (object(), "yours") for k in keys})   # as course.runtime.mine.report prints it
    good = "\n".join(table) + "\n" + mine.trained(run, "SGD", keys) + "\n"
    labels_tell_the_truth(good)
    for bad in (good.replace("on your kernels (9 of 9 pieces yours)", "on the course's kernels"),
                good.replace("on the CPU executor", "on the GPU"), good.replace("784-128", "49-128"),
                good + "test accuracy of the network you trained: 0.9\n"):
        with pytest.raises(AssertionError):
            labels_tell_the_truth(bad)
