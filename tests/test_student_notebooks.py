"""Each student notebook runs up to its first exercise and stops there with that exercise's NotImplementedError."""
import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from course import nbtools

STUDENT = sorted(nbtools.EXERCISES.glob("*.ipynb"))


def first_exercise(path):
    for cell in nbtools.read(nbtools.NOTEBOOKS / path.name)["cells"]:
        src = nbtools.source(cell)
        if cell["cell_type"] == "code" and nbtools.BEGIN in src:
            return nbtools.EXERCISE_RE.search(src).group(1)


def test_there_is_a_student_copy_of_every_notebook():
    assert [p.name for p in STUDENT] == [p.name for p in nbtools.solution_notebooks()]


@pytest.mark.parametrize("path", STUDENT, ids=lambda p: p.name)
def test_student_notebook_stops_at_first_exercise(path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(nbtools.NOTEBOOKS)}})
    with pytest.raises(CellExecutionError) as e:
        client.execute()
    label = first_exercise(path)
    assert e.value.ename == "NotImplementedError", e.value
    assert label in e.value.evalue, (label, e.value.evalue)
    errors = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
              and any(o.get("output_type") == "error" for o in c.outputs)]
    assert len(errors) == 1
    before = "".join(c.source for c in nb.cells[:errors[0] + 1] if c.cell_type == "code")
    assert label in before, "the error came before the first exercise's cell"
