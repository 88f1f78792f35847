"""A class on JupyterHub, in a real (headless) browser: ``python -m grader hub`` end to end.

The hub is prepared and started as ``python -m grader hub`` does (:mod:`grader.deploy.jupyterhub.hub`),
in a scratch folder, on a free loopback port, with three real Unix accounts made for the test
(an instructor, two students; removed at the end). Headless Chromium logs each of them in on the
hub's login page (PAM) and, from that person's own pages, does one round of ``01_devices``:

1. the instructor generates and releases it (the formgrader's *Generate* and *Release* calls);
2. each student fetches it from the Assignment List, puts in an answer (one the reference, one
   the wrong ``pick_device`` of the sample ``wrong_pick_device_returns_str``) and submits it;
3. the instructor collects, autogrades each submission with the course's preprocessors, and
   generates and releases feedback;
4. each student fetches feedback and opens it: their own score, nobody else's;
5. neither student can read the other's home folder, the exchange's inbound submissions or the
   instructor's gradebook (tried as that Unix user).

The page's buttons are not clicked one by one: the test calls, from the logged-in page and with
its XSRF token, the same endpoints the formgrader's and the Assignment List's buttons call, and
writes the answer through the student's contents API (typing into a notebook is what
``tests/test_browser.py`` checks). Screenshots of each step go to ``.artifacts/hub/``
(``HUB_ARTIFACTS`` to change it). The test skips, with the reason, where it cannot run: not root
(it makes accounts), no ``configurable-http-proxy`` and no ``npm`` to install it, no Chromium.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from grader.grading.config import COURSE_ID
from grader.runtime import course
from grader.tools import samples

from .helpers import CHROMEDRIVER, CHROMIUM, headless_chromium, wait_for

ASSIGNMENT = "01_devices"
WRONG_SAMPLE = "wrong_pick_device_returns_str"
INSTRUCTOR, GOOD, BAD = "gcinstructor", "gcstudent1", "gcstudent2"
PASSWORD = "hub-test-" + os.urandom(6).hex()
ARTIFACTS = Path(os.environ.get("HUB_ARTIFACTS", course.REPO / ".artifacts" / "hub"))


def _cannot_run() -> str | None:
    if os.geteuid() != 0:
        return "makes Unix accounts: run as root"
    if not (CHROMIUM and CHROMEDRIVER):
        return "needs Chromium and chromedriver: apt-get install chromium chromium-driver"
    if not (shutil.which("configurable-http-proxy") or shutil.which("npm")):
        return (
            "needs configurable-http-proxy or npm to install it (npm i -g configurable-http-proxy)"
        )
    if not (shutil.which("useradd") and shutil.which("runuser")):
        return "needs useradd and runuser"
    if importlib.util.find_spec("jupyterhub") is None:
        return "needs jupyterhub: pip install -r requirements.txt"
    return None


pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,  # a hub, three servers, a real autograde: minutes
    pytest.mark.timeout(900),
    pytest.mark.skipif(_cannot_run() is not None, reason=_cannot_run() or ""),
]


def _free_port() -> int:
    """A port p with p+1 and p+2 free too (the hub's API and the proxy's)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port > 65000:
            continue
        try:
            for extra in (1, 2):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port + extra))
            return port
        except OSError:
            continue
    raise AssertionError("no three free ports in a row")


def _remove_account(name: str) -> None:
    try:
        uid = pwd.getpwnam(name).pw_uid
    except KeyError:
        return
    pids = subprocess.run(["pgrep", "-U", str(uid)], capture_output=True, text=True).stdout.split()
    for pid in pids:  # servers and kernels the hub did not stop
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    subprocess.run(["userdel", "--remove", name], capture_output=True)


@pytest.fixture(scope="module")
def hub():
    from grader.deploy.jupyterhub import hub as hubmod

    for name in (INSTRUCTOR, GOOD, BAD):  # left over from an interrupted run
        _remove_account(name)
    root = Path(tempfile.mkdtemp(prefix="gpu-course-hub-", dir="/tmp"))
    root.chmod(0o755)
    started = time.monotonic()
    hubmod.prepare(root, INSTRUCTOR, (GOOD, BAD), PASSWORD, log=lambda *a: None)
    port = _free_port()
    env = hubmod.hub_environment(root, INSTRUCTOR, (GOOD, BAD), port)
    log_path = root / "jupyterhub.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        hubmod.hub_command(),
        env=env,
        cwd=root / "state",
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"

    def up():
        if proc.poll() is not None:
            raise AssertionError(f"JupyterHub exited ({proc.returncode}):\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(f"{base}/hub/api", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    try:
        wait_for(up, 120, "JupyterHub to answer")
        print(f"hub prepared and up in {time.monotonic() - started:.1f} s")
        yield {"base": base, "root": root, "log": log_path}
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):  # the hub stops the servers it started
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, sig)
                proc.wait(timeout=30)
        log.close()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(log_path, ARTIFACTS / "jupyterhub.log")
        for name in (INSTRUCTOR, GOOD, BAD):
            _remove_account(name)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(hub):
    with headless_chromium(ARTIFACTS, script_timeout_s=600) as driver:
        yield driver


class Person:
    """One account in the browser: logs in on the hub's page, then works from its own server."""

    shots = 0

    def __init__(self, driver, hub: dict, name: str):
        self.driver, self.hub, self.name = driver, hub, name
        self.user = f"{hub['base']}/user/{name}"

    def screenshot(self, step: str) -> None:
        Person.shots += 1
        self.driver.save_screenshot(str(ARTIFACTS / f"{Person.shots:02d}-{self.name}-{step}.png"))

    def login(self) -> None:
        from selenium.webdriver.common.by import By

        d = self.driver
        d.execute_cdp_cmd("Network.clearBrowserCookies", {})  # every path's, not the page's
        d.get(f"{self.hub['base']}/hub/login")
        d.find_element(By.ID, "username_input").send_keys(self.name)
        d.find_element(By.ID, "password_input").send_keys(PASSWORD)
        d.find_element(By.ID, "login_submit").click()
        wait_for(
            lambda: (
                d.current_url.startswith(self.user + "/lab")
                and d.execute_script("return !!document.querySelector('.jp-LabShell');")
            ),
            180,
            f"{self.name}'s JupyterLab to open after logging in",
            every=1,
        )
        time.sleep(2)

    def call(self, method: str, path: str, data: dict | None = None, *, form: bool = False):
        """An HTTP call from the logged-in page to this person's server, as its buttons make."""
        result = self.driver.execute_async_script(
            """
            const [method, url, data, form, done] = arguments;
            const xsrf = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || '';
            const headers = {'X-XSRFToken': decodeURIComponent(xsrf)};
            let body;
            if (data !== null) {
              if (form) {
                body = new URLSearchParams(data).toString();
                headers['Content-Type'] = 'application/x-www-form-urlencoded';
              } else {
                body = JSON.stringify(data);
                headers['Content-Type'] = 'application/json';
              }
            }
            fetch(url, {method, headers, body, credentials: 'same-origin'})
              .then(async r => done({status: r.status, text: await r.text()}))
              .catch(e => done({status: 0, text: String(e)}));
            """,
            method,
            f"{self.user}/{path}",
            data,
            form,
        )
        assert result["status"] in (200, 201), f"{self.name}: {method} {path}: {result}"
        with contextlib.suppress(ValueError):
            return json.loads(result["text"])
        return result["text"]

    def menu(self, top: str, item: str) -> str:
        """Open ``top`` in the menu bar, click ``item``; return the text of the opened menu."""
        from selenium.webdriver.common.by import By

        d = self.driver
        d.find_element(
            By.XPATH, f"//div[contains(@class,'lm-MenuBar-itemLabel') and text()='{top}']"
        ).click()
        entry = wait_for(
            lambda: d.find_elements(
                By.XPATH, f"//div[contains(@class,'lm-Menu-itemLabel') and text()='{item}']"
            ),
            10,
            f"{top} > {item}",
        )[0]
        items = d.find_element(By.CSS_SELECTOR, ".lm-Menu").text
        entry.click()
        return items

    def instructor_panels(self) -> dict:
        """Which of nbgrader's instructor panels this person's JupyterLab has."""
        return self.driver.execute_script(
            "const tabs = [...document.querySelectorAll('.lm-TabBar-tab')]"
            "  .map(t => (t.title || '') + ' ' + (t.dataset.id || '') + ' ' + t.innerText);"
            "return {create_assignment: tabs.some(t => /create.assignment/i.test(t)),"
            "        tabs: tabs};"
        )


def _ok(result: dict, what: str) -> dict:
    assert result.get("success", True), f"{what}: {json.dumps(result)[-3000:]}"
    return result


def _answer(name: str):
    """The notebook a student hands in: the reference, or with the wrong pick_device."""
    if name == GOOD:
        return samples.build_submission(ASSIGNMENT, None)
    wrong = next(s for s in samples.load_samples(ASSIGNMENT) if s.name == WRONG_SAMPLE)
    return samples.build_submission(ASSIGNMENT, dict(wrong.cells))


def _as_user(name: str, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["runuser", "-u", name, "--", *command], capture_output=True, text=True, timeout=60
    )


def test_a_class_round_on_jupyterhub(hub, browser):
    t0 = time.monotonic()
    timings = {}
    instructor = Person(browser, hub, INSTRUCTOR)
    students = {name: Person(browser, hub, name) for name in (GOOD, BAD)}

    # 1. the instructor generates and releases the assignment
    instructor.login()
    instructor.screenshot("logged-in")
    panels = instructor.instructor_panels()
    assert panels["create_assignment"], f"no Create Assignment panel for the instructor: {panels}"
    items = instructor.menu("Nbgrader", "Formgrader")
    assert "Assignment List" in items, items
    _ok(instructor.call("POST", f"formgrader/api/assignment/{ASSIGNMENT}/assign", {}), "generate")
    _ok(instructor.call("POST", f"formgrader/api/assignment/{ASSIGNMENT}/release", {}), "release")
    browser.get(f"{instructor.user}/formgrader/manage_assignments")
    wait_for(lambda: ASSIGNMENT in browser.find_element("tag name", "body").text, 60, "the list")
    instructor.screenshot("formgrader-released")
    timings["release"] = time.monotonic() - t0

    # 2. each student fetches, answers and submits
    for name, student in students.items():
        student.login()
        panels = student.instructor_panels()
        assert not panels["create_assignment"], f"a student sees Create Assignment: {panels}"
        items = student.menu("Nbgrader", "Assignment List")
        assert "Formgrader" not in items and "Course List" not in items, items
        wait_for(
            lambda: ASSIGNMENT in browser.find_element("tag name", "body").text,
            60,
            f"{name}'s Assignment List to show {ASSIGNMENT}",
        )
        student.screenshot("assignment-list")
        news = browser.execute_script(
            "return [...document.querySelectorAll('.jp-Notification-Toast, .Toastify__toast')]"
            ".map(t => t.innerText).join(' | ');"
        )
        assert "news" not in news.lower(), f"JupyterLab's news prompt shows: {news}"
        listed = student.call("GET", f"assignments?course_id={COURSE_ID}")
        assert any(a["assignment_id"] == ASSIGNMENT for a in listed["value"]), listed
        form = {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT}
        _ok(student.call("POST", "assignments/fetch", form, form=True), f"{name} fetch")
        path = f"{COURSE_ID}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"
        content = json.loads(json.dumps(_answer(name)))
        student.call("PUT", f"api/contents/{path}", {"type": "notebook", "content": content})
        browser.get(f"{student.user}/lab/tree/{path}")
        wait_for(
            lambda: browser.execute_script("return !!document.querySelector('.jp-Notebook');"),
            60,
            "the answered notebook to open",
        )
        time.sleep(2)
        student.screenshot("answered")
        _ok(student.call("POST", "assignments/submit", form, form=True), f"{name} submit")
    timings["fetch_and_submit"] = time.monotonic() - t0

    # 3. the instructor collects, autogrades and returns feedback
    instructor.login()
    _ok(instructor.call("POST", f"formgrader/api/assignment/{ASSIGNMENT}/collect", {}), "collect")
    for name in students:
        _ok(
            instructor.call("POST", f"formgrader/api/submission/{ASSIGNMENT}/{name}/autograde", {}),
            f"autograde {name}",
        )
    timings["autograde"] = time.monotonic() - t0
    subs = {
        s["student"]: s for s in instructor.call("GET", f"formgrader/api/submissions/{ASSIGNMENT}")
    }
    assert set(subs) == {GOOD, BAD}, subs
    assert subs[GOOD]["autograded"] and subs[BAD]["autograded"], subs
    assert subs[GOOD]["score"] > subs[BAD]["score"], (subs[GOOD]["score"], subs[BAD]["score"])
    browser.get(f"{instructor.user}/formgrader/manage_submissions/{ASSIGNMENT}")
    wait_for(lambda: BAD in browser.find_element("tag name", "body").text, 60, "the submissions")
    instructor.screenshot("formgrader-autograded")
    _ok(
        instructor.call("POST", f"formgrader/api/assignment/{ASSIGNMENT}/generate_feedback", {}),
        "generate feedback",
    )
    _ok(
        instructor.call("POST", f"formgrader/api/assignment/{ASSIGNMENT}/release_feedback", {}),
        "release feedback",
    )

    # 4. each student fetches feedback: their own score, nobody else's
    for name, student in students.items():
        student.login()
        form = {"course_id": COURSE_ID, "assignment_id": ASSIGNMENT}
        _ok(student.call("POST", "assignments/fetch_feedback", form, form=True), f"{name} feedback")
        folder = f"{COURSE_ID}/{ASSIGNMENT}/feedback"
        stamps = student.call("GET", f"api/contents/{folder}")["content"]
        assert stamps, f"{name} has no feedback folder"
        html_path = f"{stamps[0]['path']}/{ASSIGNMENT}.html"
        browser.get(f"{student.user}/files/{html_path}")
        text = browser.find_element("tag name", "body").text
        score = subs[name]["score"]
        max_score = subs[name]["max_score"]
        assert f"{score:g}" in text and f"{max_score:g}" in text, (score, max_score, text[:500])
        other = BAD if name == GOOD else GOOD
        assert other not in text, f"{name}'s feedback names {other}"
        student.screenshot("feedback")
    timings["feedback"] = time.monotonic() - t0

    # 5. what one student cannot read as their own Unix user
    gradebook = Path(pwd.getpwnam(INSTRUCTOR).pw_dir) / "course" / "work" / "gradebook.db"
    assert gradebook.exists()
    inbound = hub["root"] / "exchange" / COURSE_ID / "inbound"
    for name, other in ((GOOD, BAD), (BAD, GOOD)):
        other_home = pwd.getpwnam(other).pw_dir
        for target in (gradebook, f"{other_home}/{COURSE_ID}/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"):
            r = _as_user(name, "cat", str(target))
            assert r.returncode != 0 and "Permission denied" in r.stderr, (name, target, r)
        r = _as_user(name, "ls", str(inbound))
        assert r.returncode != 0 and "Permission denied" in r.stderr, (name, inbound, r)
    print("timings (s from the start):", {k: round(v, 1) for k, v in timings.items()})
