"""A student's workspace (``python -m grader start``): filled from the release, never losing the
student's work, and a Lab that shows only the student's things (issue 38)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from grader.deploy import workspace
from grader.runtime import course

from .helpers import wait_for

A = "01_devices"
NB = Path(A) / f"{A}.ipynb"


@pytest.fixture
def release(tmp_path, monkeypatch):
    """A copy of ``notebooks/`` standing in for the release, so a test can publish a newer one."""
    copy = tmp_path / "release"
    shutil.copytree(course.NOTEBOOKS, copy, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    monkeypatch.setattr(course, "NOTEBOOKS", copy)
    return copy


def test_the_first_start_copies_the_release_and_the_images(tmp_path, release):
    ws = tmp_path / "ws"
    assert workspace.fill(ws) == []
    for aid in course.assignments():
        mine = ws / "notebooks" / aid / f"{aid}.ipynb"
        assert mine.read_bytes() == (release / aid / f"{aid}.ipynb").read_bytes()
    assert (ws / "notebooks" / "README.md").is_file()
    assert sorted(p.name for p in (ws / "images").iterdir()) == sorted(
        p.name for p in course.IMAGES.iterdir()
    )
    # the notebooks' links to ../../images/ resolve inside the workspace
    assert (ws / "notebooks" / A / "../../images" / A).resolve().is_dir()


def test_a_later_start_keeps_the_students_work_and_offers_a_newer_release(tmp_path, release):
    ws = tmp_path / "ws"
    workspace.fill(ws)
    mine, other = ws / "notebooks" / NB, ws / "notebooks" / "02_async" / "02_async.ipynb"
    mine.write_text(mine.read_text().replace("raise NotImplementedError()", "return 'mine'", 1))
    (ws / "notebooks" / A / "my_notes.py").write_text("x = 1\n")
    answered = mine.read_bytes()
    assert workspace.fill(ws) == []  # same release: nothing to offer, nothing touched
    assert mine.read_bytes() == answered

    # a newer release of both notebooks: 02 was left as released, 01 holds the student's answer
    for rel in (NB, Path("02_async") / "02_async.ipynb"):
        path = release / rel
        path.write_text(path.read_text().replace("Learning objectives", "Learning goals", 1))
    offered = workspace.fill(ws)
    assert mine.read_bytes() == answered, "the student's answer was overwritten"
    assert (ws / "notebooks" / A / "my_notes.py").read_text() == "x = 1\n"
    beside = ws / "notebooks" / workspace.offered_name(NB)
    assert beside.read_bytes() == (release / NB).read_bytes()
    assert offered == [f"notebooks/{NB.as_posix()}: a newer release is in notebooks/"
                       f"{workspace.offered_name(NB).as_posix()}"]  # fmt: skip
    assert other.read_bytes() == (release / "02_async" / "02_async.ipynb").read_bytes()
    # still offered at the next start, and a deleted notebook comes back from the release
    assert workspace.fill(ws) == offered
    other.unlink()
    workspace.fill(ws)
    assert other.is_file()


def test_the_students_lab_configuration(tmp_path):
    config = workspace.write_student_config(tmp_path)
    server = (config / "jupyter_server_config.py").read_text()
    assert f"c.ServerApp.root_dir = {str(tmp_path.resolve())!r}" in server
    for name, on in workspace.STUDENT_SERVER_EXTENSIONS.items():
        assert f"{name!r}: {on}" in server
    page = json.loads((config / "labconfig" / "page_config.json").read_text())
    assert set(page["disabledExtensions"]) == set(workspace.STUDENT_DISABLED_PLUGINS)
    command, env = workspace.lab_command(tmp_path, ["--no-browser"])
    assert command[1:] == ["lab", "--no-browser"]
    assert env["JUPYTER_CONFIG_PATH"] == env["JUPYTER_CONFIG_DIR"] == str(config)
    news = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab" / "apputils-extension"
    assert json.loads((news / "notification.jupyterlab-settings").read_text()) == {
        "fetchNews": "false"
    }


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""
    except OSError:  # not listening yet
        return 0, b""


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_student_command_serves_only_the_workspace(tmp_path):
    """The README's student command on loopback: the file browser's root holds only the
    workspace's notebooks and images (no solutions/, grader/, tests/ or gradebook), the
    Formgrader is not served, nbgrader's instructor plugins are disabled, the Assignment List
    and Validate are there, there is no news prompt, and notebooks/ is left as committed."""
    port, token = 18000 + os.getpid() % 1000, "t0k3n"
    ws = tmp_path / "ws"
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    env.pop("JUPYTERLAB_SETTINGS_DIR", None)
    before = subprocess.run(["git", "status", "--porcelain", "notebooks"], cwd=course.REPO,
                            capture_output=True, text=True).stdout  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-m", "grader", "start", "--workspace", str(ws), "--no-browser",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _get(f"{base}/api/status?token={token}")[0] == 200, 120, "the Lab")
        status, body = _get(f"{base}/api/contents/?token={token}")
        assert status == 200
        assert sorted(c["name"] for c in json.loads(body)["content"]) == ["images", "notebooks"]
        for hidden in (".jupyter", ".release.json", "../solutions", "solutions"):
            assert _get(f"{base}/api/contents/{hidden}?token={token}")[0] in (400, 403, 404)
        assert _get(f"{base}/formgrader?token={token}")[0] == 404
        status, page = _get(f"{base}/lab?token={token}")
        config = json.loads(
            page.decode()
            .split('id="jupyter-config-data" type="application/json">', 1)[1]
            .split("</script>", 1)[0]
        )
        assert set(workspace.STUDENT_DISABLED_PLUGINS) <= set(config["disabledExtensions"])
        assert "@jupyter/nbgrader:assignment-list" not in config["disabledExtensions"]
        assert "@jupyter/nbgrader:validate-assignment" not in config["disabledExtensions"]
        status, body = _get(
            f"{base}/lab/api/settings/@jupyterlab/apputils-extension:notification?token={token}"
        )
        assert json.loads(body)["settings"].get("fetchNews") == "false"
        status, body = _get(f"{base}/api/contents/notebooks/{A}?token={token}")
        assert f"{A}.ipynb" in {c["name"] for c in json.loads(body)["content"]}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        out = server.communicate(timeout=60)[0].decode(errors="replace")
    assert f"Your workspace: {ws.resolve()}" in out
    after = subprocess.run(["git", "status", "--porcelain", "notebooks"], cwd=course.REPO,
                           capture_output=True, text=True).stdout  # fmt: skip
    assert after == before
