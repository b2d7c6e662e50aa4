"""The student's path, in a real browser: JupyterLab opens an exercise notebook, Run All stops at the first exercise,
a solution typed into the editor passes its check, and a wrong one typed in its place fails with a message that
names what is wrong.

JupyterLab serves a temporary copy of notebooks/exercises/01_data.ipynb (the committed student notebook is never
touched) with temporary settings, workspace, runtime and data directories, in the CUDA simulator. Selenium drives
Debian's headless Chromium (`apt install chromium chromium-driver`); nothing downloads a browser of its own. The
test is skipped when no browser or driver is found, except under CI (env CI set), where that is a failure.

A screenshot of each state goes to a temporary directory, kept (and its path printed) when the test fails. Set
COURSE_SCREENSHOT_DIR=DIR to keep them in DIR: docs/img/exercise-passed.png in the README is made that way.
"""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STUDENT_NOTEBOOK = ROOT / "notebooks" / "exercises" / "01_data.ipynb"
MARKER = "# Exercise 1.1: parse an IDX header"
WINDOW = (1400, 1000)

# What the student types: the whole exercise cell, one line at a time (the editor indents after a colon by itself;
# the test replaces that indentation with the line's own, so what is typed is exactly what is read back).
SOLUTION = '''\
# Exercise 1.1: parse an IDX header
def parse_idx_header(buf):
    """Return (dtype, shape, offset) from the first bytes of an IDX file; ValueError if malformed."""
    if len(buf) < 4 or buf[0] or buf[1] or buf[2] not in IDX_TYPES or buf[3] == 0:
        raise ValueError("malformed IDX header")
    offset = 4 + 4 * buf[3]
    if len(buf) < offset:
        raise ValueError("the IDX header is cut short")
    shape = tuple(int.from_bytes(buf[4 + 4 * k:8 + 4 * k], "big") for k in range(buf[3]))
    return np.dtype(IDX_TYPES[buf[2]]), shape, offset'''
WRONG = SOLUTION.replace('"big"', '"little"')  # sizes read little-endian: the check must say the shape is wrong
assert WRONG != SOLUTION

# User settings JupyterLab reads from JUPYTERLAB_SETTINGS_DIR: no auto-closed brackets or quotes (typed text stays
# as typed), every cell in the DOM (no windowing), no news or update pop-ups (the network is closed anyway).
SETTINGS = {
    "@jupyterlab/codemirror-extension/plugin.jupyterlab-settings": {"defaultConfig": {"autoClosingBrackets": False}},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {
        "windowingMode": "none", "codeCellConfig": {"autoClosingBrackets": False}},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
}

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--no-proxy-server", "--force-device-scale-factor=1", "--lang=en-US",
                  f"--window-size={WINDOW[0]},{WINDOW[1]}"]

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the server is local, whatever *_proxy says

SERVER_START_S = 120   # jupyter lab up and answering
PAGE_LOAD_S = 180      # JupyterLab's front end loaded and the file browser listing the notebook (2 slow cores)
RUN_S = 240            # kernel start + Run All up to the first exercise, in the simulator
CELL_S = 120           # one cell and its check


def _find(names):
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def _browser_and_driver():
    """(chromium, chromedriver) paths; skip without them, unless under CI, where their absence is a failure."""
    browser = _find(["/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"])
    driver = _find(["/usr/bin/chromedriver", "chromedriver"])
    try:
        import selenium  # noqa: F401
        missing = []
    except ImportError:
        missing = ["the Python package selenium (pip install -r requirements.txt)"]
    if not browser:
        missing.append("Chromium (apt install chromium)")
    if not driver:
        missing.append("chromedriver (apt install chromium-driver)")
    if missing:
        why = "the browser test needs " + " and ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(why + "; CI is set, so this is a failure, not a skip", pytrace=False)
        pytest.skip(why)
    return browser, driver


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what, condition, timeout, describe=None, poll=0.25):
    """Poll condition() until it returns something truthy; fail after timeout with what and describe()."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            state = f"\n  last state: {describe()}" if describe else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{state}")
        time.sleep(poll)


class Lab:
    """`jupyter lab` on 127.0.0.1 serving `root`, with every Jupyter directory temporary."""

    def __init__(self, root, home):
        self.root, self.home = Path(root), Path(home)
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = self.home / "jupyter.log"
        self.proc = None

    def start(self):
        dirs = {name: self.home / sub for name, sub in [
            ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
            ("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
            ("IPYTHONDIR", "ipython")]}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        for rel, value in SETTINGS.items():
            path = dirs["JUPYTERLAB_SETTINGS_DIR"] / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
        env.update({k: str(v) for k, v in dirs.items()})
        env.update(COURSE_DEVICE="sim", PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
               "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        for attempt in range(3):  # the free port may be taken between _free_port() and the server's bind
            if attempt:
                self.port = _free_port()
                self.url = f"http://127.0.0.1:{self.port}"
            self.log = open(self.log_path, "w")
            self.proc = subprocess.Popen(cmd + [f"--ServerApp.port={self.port}"], env=env,
                                         stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
            try:
                _wait("jupyter lab to answer on " + self.url, self._answers, SERVER_START_S, self.log_tail)
                return
            except AssertionError:
                exited_on_port = self.proc.poll() is not None and "already in use" in self.log_tail()
                if not exited_on_port or attempt == 2:
                    raise
                self.log.close()

    def _answers(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
        try:
            self.api("GET", "/api/status", timeout=5)
            return True
        except OSError:
            return False

    def api(self, method, path, timeout=10):
        req = urllib.request.Request(self.url + path, method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with NO_PROXY.open(req, timeout=timeout) as r:
            body = r.read()
        return json.loads(body) if body else None

    def log_tail(self, n=4000):
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def stop(self):
        """Shut the kernels down through the API, then the server: SIGTERM, and SIGKILL if it lingers."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                for kernel in self.api("GET", "/api/kernels"):
                    self.api("DELETE", f"/api/kernels/{kernel['id']}", timeout=30)
            except Exception as e:  # the server is going away anyway; SIGTERM shuts down what is left
                print(f"could not shut the kernels down through the API: {e}")
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.log.close()


# JavaScript run in the page. Cells are the `.jp-Cell`s of the visible notebook, in order.
JS_CELLS = """
const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
return panel ? Array.from(panel.querySelectorAll('.jp-Notebook .jp-Cell')) : [];
"""
JS_CELL_STATE = """
const cell = arguments[0];
const lines = Array.from(cell.querySelectorAll('.cm-content .cm-line')).map(l => l.textContent);
const out = cell.querySelector('.jp-Cell-outputArea');
const prompt = cell.querySelector('.jp-InputPrompt');
return {text: lines.join('\\n'), output: out ? out.textContent : '', prompt: prompt ? prompt.textContent : '',
        active: cell.classList.contains('jp-mod-active'), code: cell.classList.contains('jp-CodeCell')};
"""


class Student:
    """A person at JupyterLab in Chromium: opens the notebook, runs cells, types into a cell's editor."""

    def __init__(self, lab, browser, driver_path, shots):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.lab, self.shots = lab, Path(shots)
        options = webdriver.ChromeOptions()
        options.binary_location = browser
        for flag in CHROMIUM_FLAGS + [f"--user-data-dir={lab.home / 'chromium'}"]:
            options.add_argument(flag)
        # An explicit driver path: Selenium Manager (which would download drivers) is never run.
        service = Service(executable_path=driver_path, log_output=str(lab.home / "chromedriver.log"))
        self.driver = webdriver.Chrome(options=options, service=service)
        self.driver.set_page_load_timeout(PAGE_LOAD_S)
        self.driver.set_script_timeout(60)

    def quit(self):
        self.driver.quit()

    def show(self, cell):
        """Scroll the notebook so that `cell` (with its output) sits in the middle of the window."""
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", cell)

    def screenshot(self, name):
        path = self.shots / f"{name}.png"
        self.driver.save_screenshot(str(path))
        return path

    # -- reading the page
    def cells(self):
        return self.driver.execute_script(JS_CELLS)

    def state(self, cell):
        return self.driver.execute_script(JS_CELL_STATE, cell)

    def exercise_cells(self):
        """(exercise cell, its check cell): the code cell whose source has MARKER, and the one after it."""
        cells = self.cells()
        for i, cell in enumerate(cells[:-1]):
            state = self.state(cell)
            if state["code"] and MARKER in state["text"]:
                return cell, cells[i + 1]
        return None

    # -- doing things
    def keys(self, *keys, hold=None):
        """Press keys in the focused element (hold: a modifier held down meanwhile)."""
        from selenium.webdriver.common.action_chains import ActionChains
        chain = ActionChains(self.driver)
        if hold:
            chain.key_down(hold)
        chain.send_keys(*keys)
        if hold:
            chain.key_up(hold)
        chain.perform()

    def open_notebook(self, name):
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.by import By

        self.driver.get(f"{self.lab.url}/lab?token={self.lab.token}")

        def listed():
            for item in self.driver.find_elements(By.CSS_SELECTOR, ".jp-DirListing-item"):
                if item.is_displayed() and item.text.split("\n")[0] == name:
                    return item
            return None

        item = _wait(f"the file browser to list {name}", listed, PAGE_LOAD_S, self.lab.log_tail)
        ActionChains(self.driver).double_click(item).perform()
        _wait(f"{name} to open with its cells", self.exercise_cells, PAGE_LOAD_S, self.lab.log_tail)
        # Fold the file browser away: more room for the notebook.
        tab = self.driver.find_element(By.CSS_SELECTOR, ".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current")
        tab.click()
        _wait("the left sidebar to fold", lambda: not self.driver.find_elements(
            By.CSS_SELECTOR, ".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current"), 30)

    def menu(self, menu, label):
        """Click a menu in the menu bar, then its item labelled `label`."""
        from selenium.webdriver.common.by import By

        def find(selector, text):
            return next((e for e in self.driver.find_elements(By.CSS_SELECTOR, selector)
                         if e.is_displayed() and e.text.strip() == text), None)

        _wait(f"the {menu} menu", lambda: find(".lm-MenuBar-item", menu), 30).click()
        _wait(f"{label!r} in the {menu} menu", lambda: find(".lm-Menu-item .lm-Menu-itemLabel", label), 30).click()

    def type_cell(self, cell, text):
        """Click into the cell's editor, select all of it, and type `text` over it, line by line."""
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.by import By
        from selenium.webdriver.common.keys import Keys

        editor = cell.find_element(By.CSS_SELECTOR, ".cm-content")
        self.driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", cell)
        editor.click()
        _wait("the cell editor to have the focus", lambda: self.driver.execute_script(
            "return arguments[0].contains(document.activeElement);", editor), 30)
        self.keys("a", hold=Keys.CONTROL)  # in the editor, Ctrl+A selects the cell's text (not all cells)
        for i, line in enumerate(text.split("\n")):
            chain = ActionChains(self.driver)
            if i:
                # Enter, then select what the editor auto-indented (Shift+Home; nothing on an unindented line)
                # so that the line's own indentation replaces it.
                chain.send_keys(Keys.ENTER).key_down(Keys.SHIFT).send_keys(Keys.HOME).key_up(Keys.SHIFT)
            chain.send_keys(line).perform()
        _wait("the typed text in the cell", lambda: self.state(cell)["text"] == text, 30,
              lambda: f"the cell reads:\n{self.state(cell)['text']}\n  expected:\n{text}")

    def run_cell_and_check(self, exercise, check):
        """Shift+Enter in the exercise cell (runs it, moves to the check cell), Shift+Enter again (runs the check)."""
        from selenium.webdriver.common.keys import Keys

        self.keys(Keys.ENTER, hold=Keys.SHIFT)
        _wait("the check cell to become the active cell", lambda: self.state(check)["active"], 30)
        self.keys(Keys.ENTER, hold=Keys.SHIFT)

    def kernel_status(self):
        return self.driver.execute_script(
            "const e = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator');"
            "return e ? e.getAttribute('data-status') : null;")

    def wait_kernel_idle(self, timeout):
        _wait("the kernel to start and be idle", lambda: self.kernel_status() == "idle", timeout,
              lambda: f"kernel status {self.kernel_status()!r}; jupyter log:\n{self.lab.log_tail()}")

    def wait_output(self, cell, texts, what, timeout=CELL_S):
        def done():
            state = self.state(cell)
            return state if all(t in state["output"] for t in texts) and "*" not in state["prompt"] else None
        return _wait(what, done, timeout, lambda: self.state(cell))


@pytest.mark.slow
def test_student_solves_the_first_exercise_in_jupyterlab():
    browser, driver_path = _browser_and_driver()
    # One temporary directory for everything: the served copy of the notebook, Jupyter's directories and logs,
    # Chromium's profile and the screenshots. Removed when the test passes, kept (and printed) when it fails.
    work = Path(tempfile.mkdtemp(prefix="course-browser-"))
    shots = Path(os.environ.get("COURSE_SCREENSHOT_DIR") or work / "screenshots").resolve()
    shots.mkdir(parents=True, exist_ok=True)
    served = work / "notebooks"
    served.mkdir()
    shutil.copy(STUDENT_NOTEBOOK, served / STUDENT_NOTEBOOK.name)
    lab = Lab(served, work / "jupyter")
    student = None
    passed = False
    t0 = time.monotonic()

    def phase(what):  # printed with the test's output (-s, or on failure): where the time goes
        print(f"{time.monotonic() - t0:6.1f} s  {what}")

    try:
        lab.start()
        phase(f"jupyter lab answers on {lab.url}")
        student = Student(lab, browser, driver_path, shots)
        phase("Chromium started")

        # 1. Open the student notebook, Run All: it stops at the first exercise with its NotImplementedError.
        student.open_notebook(STUDENT_NOTEBOOK.name)
        phase("notebook open")
        exercise, check = student.exercise_cells()
        student.wait_kernel_idle(RUN_S)  # what a student sees in the toolbar before running anything
        phase("kernel idle")
        student.menu("Run", "Run All Cells")
        # The exercise cell only defines the stub; its check calls it and stops Run All with the stub's error.
        student.wait_output(check, ["NotImplementedError", "Exercise 1.1: parse an IDX header"],
                            "Run All to stop at Exercise 1.1's check with its NotImplementedError", timeout=RUN_S)
        assert student.state(exercise)["output"].strip() == "", student.state(exercise)
        after = student.cells()[student.cells().index(check) + 1]
        assert student.state(after)["prompt"].strip() in ("[ ]:", ""), "Run All went on past the failing check"
        student.show(check)
        student.screenshot("exercise-not-implemented")
        phase("Run All stopped at the NotImplementedError")

        # 2. Type a correct solution over the cell, run it and its check: the check passes.
        student.type_cell(exercise, SOLUTION)
        student.run_cell_and_check(exercise, check)
        state = student.wait_output(check, ["✓ Exercise 1.1 passed"], "the check to pass")
        assert "Error" not in state["output"], state["output"]
        assert "Error" not in student.state(exercise)["output"], student.state(exercise)["output"]
        student.show(check)
        student.screenshot("exercise-passed")
        phase("solution typed, check passed")

        # 3. Type a wrong solution (sizes read little-endian): the check fails and says the shape is wrong.
        student.type_cell(exercise, WRONG)
        student.run_cell_and_check(exercise, check)
        state = student.wait_output(check, ["Exercise 1.1 failed", "shape: expected"], "the check to fail")
        assert "✓" not in state["output"], state["output"]
        student.show(check)
        student.screenshot("exercise-failed")
        phase("wrong solution typed, check failed")
        passed = True
    except BaseException:
        if student is not None:
            try:
                student.screenshot("failure")
            except Exception as e:
                print(f"no failure screenshot: {e}")
        print(f"\njupyter lab's log (tail):\n{lab.log_tail()}")
        raise
    finally:
        try:
            if student is not None:
                student.quit()
        finally:
            lab.stop()
            phase("server stopped")
            if passed:
                shutil.rmtree(work, ignore_errors=True)
            else:
                print(f"\nscreenshots, logs and Jupyter's directories kept in {work}")
            if os.environ.get("COURSE_SCREENSHOT_DIR"):
                print(f"\nscreenshots in {shots}")
