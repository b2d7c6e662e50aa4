"""nbgrader's configuration for this course (nbgrader 0.9). `python -m course nbgrader-setup DIR` copies it into DIR.

The solution notebooks carry nbgrader's cell metadata (written by `python -m course export`): each exercise cell
is a solution cell (grade_id ex-N-M), each check cell a locked test cell worth 1 point.
"""
import os
import re

from nbgrader.converters import GenerateAssignment
from nbgrader.preprocessors import ClearSolutions

c = get_config()  # noqa: F821 (traitlets defines it when it loads this file)

# Grading neither saves nor uses a student's saved solutions (course.runtime.mine): each submission runs on its own code and
# the course's, never on another submission's kernels. The kernels nbgrader starts inherit this environment.
os.environ["COURSE_MINE_DIR"] = "off"

# A Jupyter kernel with the course installed (`python -m ipykernel install --user --name course` from the course's
# environment). Unset: the notebooks' own `python3`, i.e. the environment nbgrader runs in.
if os.environ.get("COURSE_KERNEL"):
    c.Execute.kernel_name = os.environ["COURSE_KERNEL"]
# nbgrader's default is 30 s per cell; in the CUDA simulator (no GPU) a notebook takes up to ~2 minutes.
c.Execute.timeout = 600

# The course's stub, as in notebooks/exercises/ (course/tools/nbtools.py: student_cell), so that checks can name the
# unfinished exercise: `# YOUR CODE HERE` then `raise NotImplementedError("Exercise N.M: title")`.
EXERCISE_RE = re.compile(r"^\s*#\s*(Exercise \d+\.\d+)\s*[:.-]\s*(.+?)\s*$", re.M)  # = course.tools.nbtools.EXERCISE_RE


class ClearSolutionsLabelled(ClearSolutions):
    """nbgrader's ClearSolutions, with a stub that names the cell's exercise."""

    def preprocess_cell(self, cell, resources, index):
        m = EXERCISE_RE.search(cell.source) if cell.cell_type == "code" else None
        if m:
            label = f"{m.group(1)}: {m.group(2)}".replace('"', "'")
            self.code_stub = dict(python=f'# YOUR CODE HERE\nraise NotImplementedError("{label}")')
        return super().preprocess_cell(cell, resources, index)


c.GenerateAssignment.preprocessors = [ClearSolutionsLabelled if p is ClearSolutions else p
                                      for p in GenerateAssignment.class_traits()["preprocessors"].default()]
