"""Google Colab: "Open in Colab" links and the student copies' first cell, which on Colab only fetches the
repository and installs what the course needs to run (numba-cuda[cu12]==0.30.4 and the pins of requirements.txt,
nothing of Jupyter's: Colab's own Jupyter server stays as it is).

Everything comes from two places: the repository's address (`[project.urls] Repository` in pyproject.toml) and
requirements.txt. `python -m course exercises` writes the first cell (nbtools.add_mine_cells calls `add_colab`);
`python -m course.tools.colab` rewrites README.md's table of links (tests/test_colab.py checks both)."""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BRANCH = "main"
HOME = "/content/course"           # where the first cell clones the repository on Colab
COLAB = "https://colab.research.google.com/github"
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
NOT_ON_COLAB = {"jupyterlab", "ipykernel", "nbformat", "nbclient", "nbval", "pytest", "pytest-xdist",
                "selenium"}  # Jupyter, tests
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"
README_BEGIN = "<!-- colab links: written by `python -m course.tools.colab` -->"
README_END = "<!-- end of colab links -->"
CELL_MARK = "# Colab only"          # the first line of the block; its presence makes add_colab idempotent


def repository():
    """The repository's public address: `Repository = "..."` under [project.urls] in pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text()
    urls = text.split("[project.urls]", 1)[1].split("\n[", 1)[0] if "[project.urls]" in text else ""
    m = re.search(r'^Repository\s*=\s*"(https://github\.com/[^/"]+/[^/"]+?)/?"', urls, re.M)
    if not m:
        raise ValueError('pyproject.toml: no `Repository = "https://github.com/OWNER/NAME"` under [project.urls]')
    return m.group(1)


def colab_link(name):
    """Colab's address of the student copy notebooks/exercises/NAME on the repository's main branch."""
    return f"{COLAB}/{repository().removeprefix('https://github.com/')}/blob/{BRANCH}/notebooks/exercises/{name}"


def badge(name):
    """The "Open in Colab" badge of one student copy, as markdown."""
    return f"[![Open in Colab]({BADGE})]({colab_link(name)})"


def install_requirements(requirements=None):
    """requirements.txt's lines for Linux (Colab), without Jupyter and the test tools, markers dropped; `-e .` is
    the clone."""
    from packaging.requirements import Requirement
    env = dict(sys_platform="linux", platform_system="Linux", platform_machine="x86_64", os_name="posix")
    out = []
    for line in (requirements or (ROOT / "requirements.txt").read_text()).splitlines():
        line = line.split(" #")[0].strip()
        if line == "-e .":
            out += ["-e", HOME]
            continue
        if not line or line.startswith(("#", "-")):
            continue
        r = Requirement(line)
        if r.name in NOT_ON_COLAB or (r.marker is not None and not r.marker.evaluate(env)):
            continue
        out.append(line.split(";")[0].strip().replace(" ", ""))   # as requirements.txt writes it
    return out


def cell_block():
    """The lines the first code cell starts with: nothing happens outside Colab. On Colab: a /content/course that is
    not a clone of the repository is moved aside (kept) and the course cloned again; a clone or an install that
    fails stops the cell with its last line of error, not a traceback."""
    args = ", ".join("HOME" if a == HOME else f'"{a}"' for a in install_requirements())
    return "\n".join([
        f"{CELL_MARK} (elsewhere nothing happens): fetch the course, install what it needs, work in its folder",
        "import sys",
        'if "google.colab" in sys.modules:',
        "    import os, subprocess, time",
        f'    REPO, HOME = "{repository()}", "{HOME}"',
        "",
        "    def setup(what, *cmd):",
        '        """Run a setup command; if it fails, stop with its first line of error (no traceback)."""',
        "        r = subprocess.run(cmd, capture_output=True, text=True)",
        "        if r.returncode:",
        '            lines = (r.stderr.strip() or r.stdout.strip() or f"exit code {r.returncode}").splitlines()',
        '            why = next((s for s in lines if s.startswith(("fatal:", "ERROR:", "error:"))), lines[-1])',
        '            raise SystemExit(f"Colab setup: {what} failed: {why}")',
        "        return r.stdout.strip()",
        "",
        "    def origin():",
        '        """The address HOME was cloned from, or None."""',
        '        r = subprocess.run(["git", "-C", HOME, "remote", "get-url", "origin"], capture_output=True, text=True)',
        '        url = r.stdout.strip().removesuffix(".git")',
        '        return url if os.path.isdir(HOME + "/.git") and not r.returncode else None',
        "    if os.path.exists(HOME) and origin() != REPO:  # not a clone of the course: kept, out of the way",
        '        os.rename(HOME, f"{HOME}-old-{time.strftime(\'%Y%m%d-%H%M%S\')}")',
        '        print(f"{HOME} was not a clone of {REPO}: moved aside, cloning the course again")',
        "    if not os.path.isdir(HOME):",
        '        setup("git clone", "git", "clone", "-q", "--depth", "1", REPO, HOME)',
        f'    setup("pip install", sys.executable, "-m", "pip", "install", "-q", {args})',
        "    sys.path.insert(0, HOME)",
        '    os.chdir(HOME + "/notebooks/exercises")',
    ])


def add_colab(nb, name):
    """A student copy with the Colab badge atop its first markdown cell and the Colab block atop its first code
    cell (idempotent)."""
    cells = nb["cells"]
    md = next((c for c in cells if c["cell_type"] == "markdown"), None)
    code = next(c for c in cells if c["cell_type"] == "code")
    text = lambda c: "".join(c["source"]) if isinstance(c["source"], list) else c["source"]  # noqa: E731
    if md is not None and BADGE not in text(md):
        md["source"] = badge(name) + "\n\n" + text(md)
    if CELL_MARK not in text(code):
        code["source"] = cell_block() + "\n" + text(code)
    return nb


def notebooks():
    """The student notebooks' names, every notebooks/NN_*.ipynb."""
    return sorted(p.name for p in (ROOT / "notebooks").glob(NOTEBOOK_GLOB))


def readme_section():
    """README.md's table of Colab links, one row per notebook."""
    rows = [f"| {name[:-6]} | {badge(name)} |" for name in notebooks()]
    return "\n".join([README_BEGIN, "| student copy | Colab |", "|---|---|", *rows, README_END])


def update_readme(check=False):
    """Rewrite the section between the markers; return True if it changed (or would)."""
    path = ROOT / "README.md"
    text = path.read_text()
    if README_BEGIN not in text or README_END not in text:
        raise ValueError(f"README.md has no `{README_BEGIN}` ... `{README_END}` section")
    head, rest = text.split(README_BEGIN, 1)
    new = head + readme_section() + rest.split(README_END, 1)[1]
    if new != text and not check:
        path.write_text(new)
    return new != text


if __name__ == "__main__":
    stale = update_readme(check="--check" in sys.argv)
    print(("out of date: " if "--check" in sys.argv else "wrote ") + "README.md" if stale else "README.md is up to date")
    sys.exit(1 if stale and "--check" in sys.argv else 0)
