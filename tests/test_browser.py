"""The course as a student and an instructor meet it: JupyterLab in a real (headless) browser.

JupyterLab is started with the README's own "Take the course" command (``python -m grader
start``, on loopback, with a token) on a scratch workspace. Headless Chromium, driven by
Selenium through Debian's ``chromedriver``, then does what a student does in
``01_devices``: runs the notebook from the Run menu, sees the plots and the "needs a GPU"
notices, types a wrong ``pick_device`` and reads the teaching failure message, types a
correct one and sees its visible test pass, and presses nbgrader's *Validate* button; the file
browser shows only the workspace (no ``solutions/``) and the Nbgrader menu no instructor panel.
The README's instructor command gives the formgrader, which lists every assignment.

A screenshot of each step is saved in ``.artifacts/browser/`` (``BROWSER_ARTIFACTS`` to
change it). The test skips, with the reason, only where Chromium or its driver is not
installed (``apt-get install chromium chromium-driver``; ``.ci/run`` installs them).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.runtime import course
from grader.tools import samples

from .helpers import CHROMEDRIVER, CHROMIUM, headless_chromium, wait_for

NOTEBOOK = "01_devices"
EXERCISE, TEST, TEST_CUDA = "pick_device", "test_pick_device", "test_pick_device_cuda"
WRONG_SAMPLE = "wrong_pick_device_returns_str"
ARTIFACTS = Path(os.environ.get("BROWSER_ARTIFACTS", course.REPO / ".artifacts" / "browser"))

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,  # starts JupyterLab and Chromium: not in the fast tier
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not (CHROMIUM and CHROMEDRIVER),
        reason="needs Chromium and chromedriver: apt-get install chromium chromium-driver",
    ),
]


# ----------------------------------------------------------------------------- the server
def readme_lab_command() -> str:
    """The part of the README's "Take the course" command that starts the student's Lab."""
    text = (course.REPO / "README.md").read_text()
    match = re.search(r"\*\*Take the course\*\*.*?```bash\n(.+?)\n```", text, re.S)
    assert match, "README.md has no **Take the course** command block"
    launch = match.group(1).split("&&")[-1].strip()
    assert "grader start" in launch, (
        f"the README's course command does not start the student's Lab: {launch}"
    )
    return launch


def readme_instructor_command() -> str:
    """The README's instructor JupyterLab command (the block after its marker)."""
    text = (course.REPO / "README.md").read_text()
    match = re.search(r"<!-- instructor-lab-command -->\n```bash\n(.+?)\n```", text, re.S)
    assert match, "README.md has no instructor-lab-command block"
    assert "jupyter lab" in match.group(1)
    return match.group(1).strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(
    cwd: Path, scratch: Path, log_name: str, command: str | None = None
) -> Iterator[dict]:
    """Run ``command`` (default: the README's student command on a workspace in ``scratch``) in
    ``cwd``, on loopback, with a token, JupyterLab's own settings and workspaces in
    ``scratch``; yield its address and token. The settings hold no news setting: the student
    command writes its own (the instructor's Lab is given one here)."""
    settings = scratch / "lab-settings"
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))  # every cell in the page
    if command is not None:  # the instructor's Lab: no "get news?" toast over the page
        news = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
        news.parent.mkdir(parents=True, exist_ok=True)
        news.write_text(json.dumps({"fetchNews": "false"}))
    command = command or f"{readme_lab_command()} --workspace {scratch / 'workspace'}"
    port, token = _free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(scratch / "lab-workspaces"),
        "JUPYTER_RUNTIME_DIR": str(scratch / "runtime"),
    }
    command = (
        f"{command} --no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port={port} "
        f"--ServerApp.port_retries=0 --IdentityProvider.token={token} "
        "--LabApp.expose_app_in_browser=True"
    )
    log_path = scratch / log_name
    log = log_path.open("w")
    server = subprocess.Popen(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"

    def up():
        if server.poll() is not None:
            raise AssertionError(
                f"JupyterLab exited ({server.returncode}):\n{log_path.read_text()}"
            )
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        wait_for(up, 120, "JupyterLab to answer")
        yield {"base": base, "token": token, "root": cwd, "log": log_path,
               "workspace": scratch / "workspace"}  # fmt: skip
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if server.poll() is not None:
                break
            try:
                os.killpg(server.pid, sig)
                server.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        log.close()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log_path, ARTIFACTS / log_name)


def _venv() -> Path:
    venv = Path(sys.prefix)
    assert (venv / "bin" / "jupyter").exists(), f"no jupyter in {venv}: install requirements.txt"
    return venv


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[dict]:
    """A student's JupyterLab: the README's student command, run from a scratch folder (with
    the course's ``.venv``) on a scratch workspace, so what the test types and saves never
    touches the course's files."""
    root = tmp_path_factory.mktemp("lab")
    (root / ".venv").symlink_to(_venv())
    with jupyterlab(root, root, "jupyterlab-student.log") as server:
        yield server


@pytest.fixture
def instructor_lab(tmp_path) -> Iterator[dict]:
    """An instructor's JupyterLab: the README's instructor command in the course folder itself
    (nbgrader needs the course inside the server's root); the test only reads pages."""
    venv = course.REPO / ".venv"
    if not (venv / "bin" / "jupyter").exists():
        pytest.skip(f"the README's command needs {venv}: create it as the README says")
    command = readme_instructor_command().replace("$PWD", str(course.REPO))
    with jupyterlab(course.REPO, tmp_path, "jupyterlab-instructor.log", command) as server:
        yield server


# ----------------------------------------------------------------------------- the browser
@pytest.fixture(scope="module")
def browser(lab):
    with headless_chromium(ARTIFACTS) as driver:
        yield driver


class Student:
    """What a student does in one open notebook, through the page."""

    def __init__(self, driver, lab: dict, name: str):
        self.driver, self.lab = driver, lab
        self.shots = 0
        ids = [course.nbgrader_meta(c).get("grade_id") for c in self.source().cells]
        self.index = {gid: i for i, gid in enumerate(ids) if gid}
        self.name = name

    def source(self):
        return course.read(course.REPO / "notebooks" / NOTEBOOK / f"{NOTEBOOK}.ipynb")

    def js(self, script: str, *args):
        return self.driver.execute_script(script, *args)

    def screenshot(self, step: str) -> Path:
        self.shots += 1
        path = ARTIFACTS / f"{self.shots:02d}-{step}.png"
        self.driver.save_screenshot(str(path))
        return path

    # -- state of the page, read from JupyterLab's own objects (window.jupyterapp)
    PANEL = "const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"

    def kernel_status(self) -> str | None:
        return self.js(
            self.PANEL + "return w && w.sessionContext && w.sessionContext.session"
            " && w.sessionContext.session.kernel ? w.sessionContext.session.kernel.status : null;"
        )

    def cell(self, index: int):
        return self.js(
            "return document.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]];", index
        )

    def output_text(self, index: int) -> str:
        return self.js(
            "const c = document.querySelectorAll('.jp-Notebook .jp-Cell')[arguments[0]];"
            "const o = c && c.querySelector('.jp-OutputArea'); return o ? o.innerText : '';",
            index,
        )

    def busy_cells(self) -> int:
        return self.js(
            "return [...document.querySelectorAll('.jp-Notebook .jp-InputArea-prompt')]"
            ".filter(p => p.innerText.includes('*')).length;"
        )

    def wait_idle(self, seconds: float = 300) -> None:
        """Until no cell is running and the kernel is idle (twice in a row, 1 s apart)."""

        def idle():
            return self.kernel_status() == "idle" and self.busy_cells() == 0

        wait_for(lambda: idle() and (time.sleep(1) or idle()), seconds, "the cells to finish")

    # -- what a student does
    def open(self) -> None:
        lab = self.lab
        self.driver.get(
            f"{lab['base']}/lab/tree/notebooks/{NOTEBOOK}/{NOTEBOOK}.ipynb?token={lab['token']}"
        )
        n_cells = len(self.source().cells)
        wait_for(
            lambda: self.js(
                self.PANEL + "return !!(w && w.content && w.content.widgets"
                " && w.content.widgets.length === arguments[0]);",
                n_cells,
            ),
            120,
            "the notebook to open",
        )
        wait_for(lambda: self.kernel_status() == "idle", 120, "the kernel to start")

    def menu(self, top: str, item: str) -> None:
        from selenium.webdriver.common.by import By

        self.driver.find_element(
            By.XPATH, f"//div[contains(@class,'lm-MenuBar-itemLabel') and text()='{top}']"
        ).click()
        entry = wait_for(
            lambda: self.driver.find_elements(
                By.XPATH, f"//div[contains(@class,'lm-Menu-itemLabel') and text()='{item}']"
            ),
            10,
            f"the menu item {top} > {item}",
        )
        entry[0].click()

    def type_into(self, index: int, code: str) -> None:
        """Click into the cell's editor, select everything and type ``code`` over it.

        The text goes in as one input event (``Input.insertText``, what a paste or an input
        method sends), so the editor's auto-indent does not re-indent typed lines.
        """
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        editor = self.cell(index).find_element("css selector", ".cm-content")
        self.js("arguments[0].scrollIntoView({block: 'center'});", editor)
        editor.click()
        ActionChains(self.driver).key_down(Keys.CONTROL).send_keys("a").key_up(
            Keys.CONTROL
        ).perform()
        self.driver.execute_cdp_cmd("Input.insertText", {"text": code})
        typed = self.js(
            self.PANEL + "return w.content.widgets[arguments[0]].model.sharedModel.getSource();",
            index,
        )
        assert typed == code, f"the editor holds something else than what was typed:\n{typed}"

    def run_selected(self) -> None:
        """Shift+Enter, as a student runs a cell."""
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        ActionChains(self.driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(
            Keys.SHIFT
        ).perform()

    def show(self, index: int) -> None:
        self.js("arguments[0].scrollIntoView({block: 'start'});", self.cell(index))
        time.sleep(0.5)


def _reference_code(grade_id: str) -> str:
    nb = course.read(course.source_path(NOTEBOOK))
    cell = next(
        c for c in course.solution_cells(nb) if course.nbgrader_meta(c)["grade_id"] == grade_id
    )
    return course.strip_solution_markers(cell.source).strip() + "\n"


# ----------------------------------------------------------------------------- the tests
@pytest.fixture(scope="module")
def student(browser, lab) -> Student:
    s = Student(browser, lab, NOTEBOOK)
    s.open()
    return s


def test_student_runs_the_notebook_from_the_run_menu(student):
    student.screenshot("notebook-opened")
    student.menu("Run", "Run All Cells")
    student.wait_idle()
    exercise_test = student.index[TEST]
    # Run All stops at the first exercise not yet written: its test says so
    assert "NotImplementedError" in student.output_text(exercise_test)
    for later in range(exercise_test + 1, len(student.source().cells)):
        assert student.output_text(later) == "", f"cell {later} ran after the stop"
    student.show(exercise_test - 1)
    student.screenshot("run-all-stops-at-the-first-exercise")


def test_plots_render_as_images_and_no_image_is_broken(student):
    images = student.js(
        "return [...document.querySelectorAll('.jp-Notebook img')].map(i =>"
        " ({src: i.src.slice(0, 80), ok: i.complete && i.naturalWidth > 0,"
        "   plot: !!i.closest('.jp-OutputArea'), w: i.naturalWidth}));"
    )
    broken = [i["src"] for i in images if not i["ok"]]
    assert not broken, f"broken images: {broken}"
    plots = [i for i in images if i["plot"]]
    assert plots, "no plot was drawn as an image"
    assert all(p["w"] >= 300 for p in plots), f"plots too small to read: {plots}"
    assert any(not i["plot"] for i in images), "the lesson's pictures (images/) did not load"
    first_plot = student.js(
        "const i = [...document.querySelectorAll('.jp-OutputArea img')][0];"
        "i.scrollIntoView({block: 'center'}); return true;"
    )
    assert first_plot
    time.sleep(0.5)
    student.screenshot("plot-rendered")


def test_gpu_notices_are_shown_without_a_gpu(student):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the notebook shows GPU results, not notices")
    text = "\n".join(student.output_text(i) for i in range(student.index[EXERCISE]))
    assert re.search(r"no CUDA GPU|needs a (CUDA )?GPU|recorded", text, re.I), text[-3000:]


def test_a_wrong_answer_gets_the_teaching_message(student):
    wrong = next(s for s in samples.load_samples(NOTEBOOK) if s.name == WRONG_SAMPLE)
    exercise, test = student.index[EXERCISE], student.index[TEST]
    student.type_into(exercise, wrong.cells[EXERCISE].strip() + "\n")
    student.run_selected()  # defines the function, selects the test cell
    student.run_selected()  # runs the visible test
    student.wait_idle(120)
    out = student.output_text(test)
    for part in ("CheckFailed", "Yours", "Expected", "Likely cause"):
        assert part in out, f"{part!r} missing from the failure message:\n{out}"
    assert "torch.device" in out, out
    student.show(exercise)
    student.screenshot("wrong-answer-teaching-message")


def test_a_correct_answer_passes_its_visible_test(student):
    exercise, test, cuda = student.index[EXERCISE], student.index[TEST], student.index[TEST_CUDA]
    student.type_into(exercise, _reference_code(EXERCISE))
    student.run_selected()
    student.run_selected()
    student.run_selected()  # the CUDA test cell
    student.wait_idle(120)
    out = student.output_text(test)
    assert out.startswith("OK:"), out
    assert "Error" not in out, out
    cuda_out = student.output_text(cuda)
    import torch

    if not torch.cuda.is_available():
        assert "NOT CHECKED here" in cuda_out, cuda_out
    student.show(exercise)
    student.screenshot("correct-answer-passes")


def test_validate_button_reports_the_result(student):
    from selenium.webdriver.common.by import By

    buttons = student.driver.find_elements(
        By.CSS_SELECTOR, "jp-button.validate-button, .validate-button jp-button"
    )
    toolbar = student.js("return document.querySelector('.jp-NotebookPanel-toolbar').outerHTML;")
    assert buttons, f"nbgrader's Validate button is not in the notebook toolbar:\n{toolbar}"
    buttons[0].click()
    dialog = wait_for(
        lambda: [
            d
            for d in student.driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog-content")
            if "Validat" in d.text and "Validating" not in d.text
        ],
        480,
        "the validation result",
        every=2,
    )[0]
    text = dialog.text
    student.screenshot("validate-result")
    # pick_device is solved, the later exercises are not: validation names what fails
    assert "failed" in text.lower(), text
    assert "check_to_device(to_device)" in text, text
    assert "check_pick_device(pick_device)" not in text, text
    student.driver.find_elements(By.CSS_SELECTOR, ".jp-Dialog-button")[-1].click()


def test_the_students_lab_shows_their_workspace_and_no_instructor_panel(student):
    """What the page shows a student: the file browser's root holds the workspace's notebooks
    and images (no solutions/, grader/, tests/), the Nbgrader menu has no Formgrader and no
    Course List, the notebook has no Create Assignment sidebar, and no news prompt."""
    from selenium.webdriver.common.by import By

    d = student.driver
    d.find_element(By.CSS_SELECTOR, ".jp-BreadCrumbs-home").click()

    def listing():
        names = sorted(e.text for e in d.find_elements(By.CSS_SELECTOR, ".jp-DirListing-itemText"))
        return names if "notebooks" in names else None

    assert wait_for(listing, 30, "the file browser at the workspace's root") == [
        "images", "notebooks"]  # fmt: skip
    student.screenshot("student-file-browser")
    menus = [e.text for e in d.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-itemLabel")]
    if "Nbgrader" in menus:
        d.find_element(
            By.XPATH, "//div[contains(@class,'lm-MenuBar-itemLabel') and text()='Nbgrader']"
        ).click()
        items = [
            e.text
            for e in d.find_elements(By.CSS_SELECTOR, ".lm-Menu-item:not(.lm-mod-hidden)")
            if e.is_displayed()
        ]
        student.screenshot("student-nbgrader-menu")
        d.find_element(By.TAG_NAME, "body").send_keys("\ue00c")  # Escape closes the menu
        assert not {i for i in items if "Formgrader" in i or "Course List" in i}, items
    page = d.find_element(By.TAG_NAME, "body").text
    assert "Create Assignment" not in page
    assert "official Jupyter news" not in page, "JupyterLab asks about news on first start"


def test_instructor_formgrader_lists_the_assignments(browser, instructor_lab):
    lab = instructor_lab
    browser.get(f"{lab['base']}/formgrader/manage_assignments?token={lab['token']}")
    wanted = course.assignments()

    def listed():
        text = browser.find_element("tag name", "body").text
        return all(a in text for a in wanted)

    try:
        wait_for(listed, 120, f"the formgrader to list {wanted}")
    except AssertionError as error:
        page = browser.find_element("tag name", "body").text
        log = lab["log"].read_text().splitlines()
        raise AssertionError(
            f"{error}\n--- the page:\n{page}\n--- the server's log (last 40 lines):\n"
            + "\n".join(log[-40:])
        ) from None
    finally:
        browser.save_screenshot(str(ARTIFACTS / "90-formgrader-assignments.png"))
