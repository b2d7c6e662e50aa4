"""Budgets a reader can keep: every notebook at most ~4,000 words of markdown (08-14 together at most 9,000), no
markdown cell over ~600 words, no code cell over ~60 lines unless it holds a single function or class (one device
function in its own cell, where it is taught). Words: whitespace-separated tokens of a markdown cell's source; lines: a code cell's source lines.
What a first reading meets is bounded too: the code left visible, outside the cells tagged `reference`, whose source
JupyterLab shows collapsed (course.tools.nbtools.collapse_reference), at most what 01-07 show.

A first reading of each performance notebook (08-14) fits ~45 minutes by one fixed rule, the same for every notebook
(first_reading): its student copy's prose, visible code, saved outputs and exercises, each at a stated rate; 08-14
together fit 4 hours. An appendix (15 and on: optional, read after 14, needed by none of 01-14) counts in none of
08-14's budgets and has its own, smaller one. `python tests/test_notebook_sizes.py` prints the table for all of them.

A few cells of notebooks 01-07 were over the budget when it was set; they are pinned at their size (OVER), so they
cannot grow, and the test fails once one fits (then it leaves the list)."""
import ast
import io
import re
import tokenize
import sys
from pathlib import Path

import pytest

from course.tools import nbtools

NOTEBOOK_WORDS = 4100   # ~4,000 words of markdown per notebook
CELL_WORDS = 620        # ~600 words per markdown cell
CODE_LINES = 65         # ~60 lines per code cell
VISIBLE_LINES = 650     # code lines a first reading meets (01-07: 220 to 636)
OVER = {  # (notebook, cell id): its lines when the budget was set (2026-12-02), a code cell of several definitions
    ("01_data", "c013"): 83,
    ("01_data", "c017"): 141,
    ("05_update", "c014"): 80,
    ("06_train", "c015b"): 85,
}
NOTEBOOKS = [p.stem for p in nbtools.solution_notebooks()]
# A first reading, by one rule for every notebook: the rates of the fresh students' trials (2026-12-06).
PROSE_WPM = 150          # words of markdown a minute, technical prose read closely
CODE_LPM = 20            # visible non-blank code lines a minute (kernels slower, harness faster)
SAVED_LPM = 10           # lines of a saved output a minute (tables read for what they show)
FIGURE_MIN = 1           # minutes a saved plot
EXERCISE_MIN = 7         # minutes an exercise (the trials: 2-10)
PERF_MINUTES = 48        # ~45 minutes for each of 08-14 (the fresh students' trials)
APPENDIX = "15"          # notebooks numbered from here on are optional appendices, read after 14 (15: 09's matmul ladder)
APPENDICES = [n for n in NOTEBOOKS if n >= APPENDIX]
PERFORMANCE = [n for n in NOTEBOOKS if "08" <= n < APPENDIX]
PERFORMANCE_HALF_WORDS = 9000  # words of markdown in 08-14 together: a reader's budget (issue 51, item 6)
PERFORMANCE_HALF_MINUTES = 240  # a first reading of 08-14 together, exercises included: 4 hours (issue 51, item 6)
APPENDIX_WORDS = 1500    # an appendix's own budget of markdown words, outside 08-14's
APPENDIX_MINUTES = 30    # and of a first reading


def cells(name):
    return nbtools.read(nbtools.NOTEBOOKS / f"{name}.ipynb")["cells"]


def words(cell):
    return len(nbtools.source(cell).split())


def one_definition(src):
    """Whether a code cell (directives aside) is a single function or class."""
    try:
        body = ast.parse(nbtools._strip(src, solution_markers=False)).body
    except SyntaxError:
        return False
    return len(body) == 1 and isinstance(body[0], (ast.FunctionDef, ast.ClassDef))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_markdown_fits_the_budget(name):
    md = [c for c in cells(name) if c["cell_type"] == "markdown"]
    total = sum(map(words, md))
    assert total <= NOTEBOOK_WORDS, f"{name}: {total} words of markdown (budget {NOTEBOOK_WORDS})"
    for c in md:
        assert words(c) <= CELL_WORDS, f"{name} cell {c['id']}: {words(c)} words (budget {CELL_WORDS}): split it"


def markdown_words(name):
    """Words of markdown in a solution notebook."""
    return sum(words(c) for c in cells(name) if c["cell_type"] == "markdown")


def test_the_performance_half_fits_a_readers_budget():
    total = {name: markdown_words(name) for name in PERFORMANCE}
    assert [n[:2] for n in total] == ["08", "10", "11", "12", "13", "14"], list(total)  # 09 is the appendix 15
    assert sum(total.values()) <= PERFORMANCE_HALF_WORDS, (
        f"08-14: {sum(total.values())} words of markdown (budget {PERFORMANCE_HALF_WORDS}: {total}): cut repetition, "
        "asides and hedges, not definitions")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_code_cells_fit_the_budget(name):
    for c in cells(name):
        src = nbtools.source(c)
        n = len(src.splitlines())
        if c["cell_type"] != "code" or n <= CODE_LINES or one_definition(src):
            assert (name, c.get("id")) not in OVER or n > CODE_LINES, f"{name} cell {c['id']} fits now: unpin it"
            continue
        pinned = OVER.get((name, c["id"]))
        assert pinned is not None, (f"{name} cell {c['id']}: {n} lines (budget {CODE_LINES}): split it at function "
                                    "boundaries, each device function in its own cell")
        assert n <= pinned, f"{name} cell {c['id']}: {n} lines, more than the {pinned} it was pinned at"


def test_the_pinned_cells_exist():
    ids = {(name, c.get("id")) for name in NOTEBOOKS for c in cells(name)}
    assert set(OVER) <= ids, set(OVER) - ids


def hidden(cell):
    return bool(cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"))


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_visible_code_fits_a_first_reading(name):
    code = [c for c in cells(name) if c["cell_type"] == "code"]
    visible = sum(len(nbtools.source(c).splitlines()) for c in code if not hidden(c))
    assert visible <= VISIBLE_LINES, (f"{name}: {visible} lines of visible code (budget {VISIBLE_LINES}): tag "
                                      f"reference cells `{nbtools.REFERENCE}`")
    for c in code:
        assert hidden(c) == (nbtools.REFERENCE in c["metadata"].get("tags", [])), (
            f"{name} cell {c['id']}: collapsed without the `{nbtools.REFERENCE}` tag, or tagged and shown: run "
            "`python -m course export`")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_student_copy_collapses_the_same_cells(name):
    solution = {c["id"] for c in cells(name) if hidden(c)}
    student = {c["id"] for c in nbtools.read(nbtools.EXERCISES / f"{name}.ipynb")["cells"] if hidden(c)}
    assert student == solution


def test_only_exported_code_without_output_is_collapsed():
    cell = dict(cell_type="code", id="x", metadata={"tags": [nbtools.REFERENCE]}, outputs=[],
                source="#| export fused\ndef f():\n    return 1")
    nbtools.collapse_reference(cell, "x")
    assert cell["metadata"]["jupyter"] == {"source_hidden": True}
    cell["metadata"]["tags"] = []
    nbtools.collapse_reference(cell, "x")
    assert "jupyter" not in cell["metadata"]
    for bad in (dict(cell, source="print(1)"), dict(cell, outputs=[{"output_type": "stream", "text": "1"}]),
                dict(cell, source="#| export fused\n# Exercise 1.1: f\n### BEGIN SOLUTION\n### END SOLUTION")):
        bad = dict(bad, metadata={"tags": [nbtools.REFERENCE]})
        with pytest.raises(ValueError, match="only an exported code cell"):
            nbtools.collapse_reference(bad, "x")


def first_reading(name):
    """What a first reading of a student copy meets: prose words, visible code lines, saved lines and plots, exercises."""
    load = dict(prose=0, code=0, saved=0, figures=0, exercises=0)
    for c in nbtools.read(nbtools.EXERCISES / f"{name}.ipynb")["cells"]:
        src = nbtools.source(c)
        if c["cell_type"] == "markdown" and src.startswith("**Saved on an"):
            load["saved"] += sum(1 for line in src.splitlines()[1:] if line.strip() and not line.startswith(("```", "![")))
            load["figures"] += src.count("![saved figure")
        elif c["cell_type"] == "markdown":
            load["prose"] += len(src.split())
        elif not hidden(c):
            load["code"] += sum(1 for line in src.splitlines() if line.strip())
            load["exercises"] += bool(re.search(r"^# Exercise \d+\.\d+", src, re.M))
    return load


def minutes(load):
    return (load["prose"] / PROSE_WPM + load["code"] / CODE_LPM + load["saved"] / SAVED_LPM
            + load["figures"] * FIGURE_MIN + load["exercises"] * EXERCISE_MIN)


@pytest.mark.parametrize("name", PERFORMANCE)
def test_a_performance_notebook_reads_in_about_45_minutes(name):
    load = first_reading(name)
    assert load["exercises"] >= 2, load
    assert minutes(load) <= PERF_MINUTES, (f"{name}: a first reading takes ~{minutes(load):.0f} minutes ({load}; budget "
                                           f"{PERF_MINUTES}): collapse reference code, cut prose")


def test_the_performance_half_reads_in_4_hours():
    took = {name: round(minutes(first_reading(name))) for name in PERFORMANCE}
    assert sum(took.values()) <= PERFORMANCE_HALF_MINUTES, (
        f"08-14: a first reading takes ~{sum(took.values())} minutes ({took}; budget {PERFORMANCE_HALF_MINUTES})")


def test_the_matmul_ladder_is_an_optional_appendix():
    """09's matmul ladder reads after 14 as notebook 15 (issue 51, item 2); its occupancy exercise is 11.4."""
    assert APPENDICES == ["15_matmul"], APPENDICES
    assert "09_matmul" not in NOTEBOOKS


@pytest.mark.parametrize("name", APPENDICES)
def test_an_appendix_is_optional_and_keeps_its_own_budget(name):
    title = nbtools.source(cells(name)[0]).splitlines()[0]
    assert re.fullmatch(rf"# {name[:2]} · Appendix: .+ \(optional\)", title), title
    assert markdown_words(name) <= APPENDIX_WORDS, f"{name}: {markdown_words(name)} words (budget {APPENDIX_WORDS})"
    load = first_reading(name)
    assert load["exercises"] >= 1 and minutes(load) <= APPENDIX_MINUTES, (name, load, minutes(load))


def test_no_notebook_before_the_appendices_needs_one():
    """01-14 import no module an appendix exports: a student who skips the appendices misses nothing later."""
    theirs = {module for module, (owners, _) in nbtools.module_sources().items()
              if all(Path(o).stem in APPENDICES for o in owners)}
    assert theirs == {"matmul"}, theirs
    for name in NOTEBOOKS:
        if name in APPENDICES:
            continue
        for c in cells(name):
            used = {m for m in theirs if re.search(rf"\bcourse\.{m}\b", nbtools.source(c))}
            assert c["cell_type"] != "code" or not used, f"{name} cell {c['id']} uses the appendix's course.{used}"


# Terms of 08-14 that a fresh student met before their definition (issue 51): a mention (regex, any case) in prose,
# a code cell's comments and docstrings included, and where each is first written in bold in a markdown cell, its
# definition. The appendix's glossary (15) comes too late. EARLY pins a known earlier mention in a cell that cannot
# change now (it fails once fixed, then the term leaves the list).
TERMS = {
    "register blocking": r"register blocking",
    "bank": r"\bbanks?\b",
    "bank conflict": r"bank conflicts?",
    "ptxas": r"\bptxas\b",
    "spill": r"\bspill",
    "occupancy": r"\boccupancy\b",
    "proxy": r"\bprox(?:y|ies)\b",
    "mbarrier": r"\bmbarrier\b",
    "reduce-scatter": r"reduce-scatter",
    "split-K": r"split-K",
}
EARLY = {"mbarrier": ("11_fused", "c039-2")}  # a comment among 11's collapsed constants, before section 2 defines it


def prose(cell):
    """A markdown cell's text, or a code cell's comments and strings (its docstrings): what names a term in words."""
    src = nbtools.source(cell)
    if cell["cell_type"] != "code":
        return src
    try:
        return "\n".join(t.string for t in tokenize.generate_tokens(io.StringIO(src).readline)
                         if t.type in (tokenize.COMMENT, tokenize.STRING))
    except (tokenize.TokenError, SyntaxError):
        return src


def first_mention_and_definition(term):
    """(the first cell of 08-14, in reading order, that mentions `term`, the first that defines it), each (name, id)."""
    mention = definition = None
    for name in PERFORMANCE:
        for c in cells(name):
            text = prose(c)
            if mention is None and re.search(TERMS[term], text, re.I):
                mention = (name, c["id"])
            if (definition is None and c["cell_type"] == "markdown"
                    and re.search(r"\*\*" + TERMS[term] + r"\w*\*\*", text, re.I)):
                definition = (name, c["id"])
    return mention, definition


@pytest.mark.parametrize("term", TERMS)
def test_the_performance_half_defines_a_term_where_it_is_first_used(term):
    """A term the kernels' prose or code comments use is defined (in bold) in that cell or before it, not only in 15."""
    mention, definition = first_mention_and_definition(term)
    assert mention, f"{term!r}: no cell of 08-14 mentions it (drop it from TERMS)"
    assert definition, f"{term!r} is used in {mention} and defined nowhere in 08-14: define it there"
    order = [(name, c["id"]) for name in PERFORMANCE for c in cells(name)]
    early = order.index(definition) > order.index(mention)
    if term in EARLY:
        assert early and mention == EARLY[term], f"{term!r}: first used in {mention}, defined in {definition}: update EARLY"
    else:
        assert not early, f"{term!r} is used in {mention} before its definition in {definition}: define it there"


def test_prose_sends_the_reader_to_the_notebook_that_climbs_the_rungs():
    """"notebook NN's rungs" names the notebook whose code climbs them (`ladder(...)`): 12, since 11 was split."""
    climbs = {name[:2] for name in PERFORMANCE for c in cells(name)
              if c["cell_type"] == "code" and re.search(r"\bladder\(", nbtools.source(c))}
    assert len(climbs) == 1, climbs
    for name in NOTEBOOKS:
        for c in cells(name):
            for nb in re.findall(r"notebook (\d+)'s rungs", nbtools.source(c), re.I) if c["cell_type"] == "markdown" else ():
                assert {nb} == climbs, f"{name} cell {c['id']}: notebook {nb}'s rungs, but notebook {climbs} climbs them"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_notebook_ends_on_prose(name):
    """Its last cell is markdown (what was built, what comes next), not a check a reader stops at (issue 51)."""
    last = cells(name)[-1]
    assert last["cell_type"] == "markdown", f"{name} ends on {last['cell_type']} cell {last['id']}: add a closing cell"


def test_the_reading_rule_counts_what_it_says():
    load = first_reading("14_race")
    assert load["prose"] > 500 and load["code"] > 20 and load["saved"] > 5 and load["exercises"] == 2, load
    assert minutes(dict(prose=150, code=20, saved=10, figures=1, exercises=1)) == 1 + 1 + 1 + FIGURE_MIN + EXERCISE_MIN


if __name__ == "__main__":
    print(f"first reading: prose at {PROSE_WPM} words/min, visible code at {CODE_LPM} lines/min, saved output at "
          f"{SAVED_LPM} lines/min, {FIGURE_MIN} min a plot, {EXERCISE_MIN} min an exercise")
    for name in NOTEBOOKS:
        load = first_reading(name)
        print(f"{name:14s} " + "  ".join(f"{k} {v:5d}" for k, v in load.items()) + f"   ~{minutes(load):3.0f} min",
              file=sys.stdout)
