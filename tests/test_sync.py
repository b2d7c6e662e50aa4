"""One source of truth: course/ matches the notebooks' export cells, and the student notebooks are current."""
from pathlib import Path

import pytest

from course.tools import nbtools


def test_package_matches_notebooks():
    assert nbtools.export(check=True) == [], "run `python -m course export` and commit"


def test_generated_modules_mark_each_chunk_with_its_cell():
    """Every exported chunk is led by `# %% notebooks/NN_topic.ipynb cell <id>` naming the cell it comes from
    (export --check above compares the markers too: they are part of the sync)."""
    cells, modules = {}, set()   # a module may span consecutive notebooks (course.fused: 11 and 12)
    for nb in nbtools.solution_notebooks():
        cells[nb.name] = {c.get("id"): nbtools.source(c) for c in nbtools.read(nb)["cells"] if c["cell_type"] == "code"}
        modules |= set(nbtools.exported_modules(nb))
    seen = 0
    for module in sorted(modules):
        lines = (nbtools.PACKAGE / f"{module}.py").read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.startswith("# %% "):
                name, _, cell_id = line[len("# %% notebooks/"):].partition(" cell ")
                assert cell_id in cells.get(name, {}), f"course/{module}.py:{i + 1}: {line}"
                assert module in nbtools.exported_modules(nbtools.NOTEBOOKS / name), (module, line)
                assert nbtools._strip(cells[name][cell_id]).splitlines()[0] == lines[i + 1], (module, line)
                seen += 1
    assert seen == sum(len(c) for nb in nbtools.solution_notebooks() for c in nbtools.exported_modules(nb).values())


def test_a_module_spans_only_consecutive_notebooks(tmp_path, monkeypatch):
    """course.fused is written by notebooks 11 and 12, one after the other; a module whose notebooks are not
    consecutive (a third notebook between them) is refused, by the export and by the student build, since its code would run out of the order it is taught."""
    for name, module in (("01_a", "m"), ("02_b", "other"), ("03_c", "m")):
        nb = {"cells": [{"cell_type": "code", "id": "x", "metadata": {}, "outputs": [], "execution_count": None,
                         "source": f"#| export {module}\nX_{name[:2]} = 1\n"}], "metadata": {}, "nbformat": 4,
              "nbformat_minor": 5}
        (tmp_path / f"{name}.ipynb").write_text(nbtools.dumps(nb), encoding="utf-8")
    monkeypatch.setattr(nbtools, "NOTEBOOKS", tmp_path)
    monkeypatch.setattr(nbtools, "PACKAGE", tmp_path / "pkg")
    with pytest.raises(ValueError, match="not consecutive"):
        nbtools.export(check=True)
    from course.tools import teach
    with pytest.raises(ValueError, match="not consecutive"):   # the student build groups them the same way
        teach.student_modules()


def test_student_notebooks_are_current():
    assert nbtools.make_exercises(check=True) == [], "run `python -m course exercises` and commit"


APPENDIX = "15"   # notebooks from here on are optional appendices (tests/test_notebook_sizes.py): one exercise will do


def test_every_notebook_has_exercises_with_labels():
    for path in nbtools.solution_notebooks():
        cells = [nbtools.source(c) for c in nbtools.read(path)["cells"] if c["cell_type"] == "code"]
        labels = [m.group(1) for c in cells if nbtools.BEGIN in c for m in [nbtools.EXERCISE_RE.search(c)]]
        least = 1 if path.name >= APPENDIX else 2
        assert len(labels) >= least, f"{path.name}: fewer than {least} exercises"
        assert len(set(labels)) == len(labels), f"{path.name}: duplicate exercise labels {labels}"
        number = path.name[:2].lstrip("0")
        assert all(label.startswith(f"Exercise {number}.") for label in labels), labels


def test_student_cell_replaces_solution_and_keeps_the_rest():
    src = ("#| export\n# Exercise 3.2: the thing\ndef f(x):\n    \"\"\"Doc.\"\"\"\n"
           "    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\n")
    out = nbtools.student_cell(src, "t")
    assert "return x + 1" not in out and "#| export" not in out
    assert '    raise NotImplementedError("Exercise 3.2: the thing")' in out and '"""Doc."""' in out


def test_student_cell_needs_a_label_and_an_end():
    with pytest.raises(ValueError, match="Exercise N.M"):
        nbtools.student_cell("### BEGIN SOLUTION\nx = 1\n### END SOLUTION", "t")
    with pytest.raises(ValueError, match="without"):
        nbtools.student_cell("# Exercise 1.1: a\n### BEGIN SOLUTION\nx = 1", "t")


def test_cli_check_exits_nonzero_when_stale(tmp_path, monkeypatch):
    import course.__main__ as cli
    monkeypatch.setattr(nbtools, "PACKAGE", tmp_path)
    monkeypatch.setattr(nbtools, "ROOT", tmp_path.parent)
    assert cli.main(["export", "--check"]) == 1


def test_export_refuses_before_it_writes_anything(tmp_path, monkeypatch):
    """A regression: two `# Exercise 3.1` cells were refused only after course/loss.py had been rewritten."""
    def cell(i, src):
        return {"cell_type": "code", "id": f"c{i}", "metadata": {}, "outputs": [], "execution_count": None,
                "source": src}
    def exercise(label, name):
        return f"#| export\n# {label}: {name}\ndef {name}():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n"
    nb = {"cells": [cell(0, "#| default_exp loss\n"), cell(1, exercise("Exercise 3.1", "f")), cell(2, "check_f(f)"),
                    cell(3, exercise("Exercise 3.1", "g")), cell(4, "check_g(g)")],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "03_loss.ipynb").write_text(nbtools.dumps(nb), encoding="utf-8")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "loss.py").write_text("# AUTOGENERATED before\n")
    monkeypatch.setattr(nbtools, "NOTEBOOKS", tmp_path)
    monkeypatch.setattr(nbtools, "PACKAGE", tmp_path / "pkg")
    monkeypatch.setattr(nbtools, "ROOT", tmp_path)
    with pytest.raises(ValueError, match=r"cells 1 and 3 are both `# Exercise 3.1`"):
        nbtools.export()
    assert (tmp_path / "pkg" / "loss.py").read_text() == "# AUTOGENERATED before\n"
    nb["cells"][3]["source"] = exercise("Exercise 3.2", "g")
    (tmp_path / "03_loss.ipynb").write_text(nbtools.dumps(nb), encoding="utf-8")
    assert Path("pkg/loss.py") in nbtools.export()  # once well formed, it is written
    assert "return 1" in (tmp_path / "pkg" / "loss.py").read_text()
