"""A student's own workspace and JupyterLab: ``python -m grader start``.

The README's student command. It fills a workspace (default ``workspace/`` in the checkout,
git-ignored) from the committed release and opens JupyterLab on it, so a student never works
in ``notebooks/`` (the release instructors hand out) and never sees the instructor's side:

- ``<workspace>/notebooks/<assignment>/``: each assignment's release, copied on the first
  start; later starts never overwrite a file the student changed. When the release of a file
  changes (a newer course), a file the student left as released is updated; a changed one is
  kept and the new release is put beside it as ``<name>.new-release<suffix>`` (offered, not
  forced). What was last copied is recorded in ``<workspace>/.release.json`` (hidden).
- ``<workspace>/images/``: the course's figures, which the notebooks link to as
  ``../../images/`` (refreshed at every start).
- The server's root is the workspace, so ``solutions/``, ``grader/``, ``tests/`` and the
  gradebook are not reachable from the file browser. Its Jupyter configuration is the student
  one of :func:`write_student_config` (in ``<workspace>/.jupyter/``, hidden): nbgrader's
  Assignment List and Validate on; the Formgrader, Course List and Create Assignment off (server
  extensions and JupyterLab plugins); no news prompt (the notification setting, which
  ``LabApp.news_url = None`` alone does not stop). Instructors keep the full Lab with the
  README's instructor command.

May use: :mod:`grader.runtime`, :mod:`grader.grading` (the release's ignore list, the course's
nbgrader configuration).
"""

from __future__ import annotations

import filecmp
import fnmatch
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from grader.runtime import course

#: Where ``python -m grader start`` keeps the student's work unless told otherwise.
DEFAULT_WORKSPACE = course.REPO / "workspace"
#: What was last copied from the release, per file (relative path -> sha256).
RECORD = ".release.json"
#: The student's Jupyter configuration, inside the workspace but hidden from the file browser.
CONFIG = ".jupyter"
#: JupyterLab plugins a student does not get (nbgrader's instructor panels).
STUDENT_DISABLED_PLUGINS = (
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:course-list",
)
#: nbgrader's server extensions, and whether a student's server loads each.
STUDENT_SERVER_EXTENSIONS = {
    "nbgrader.server_extensions.formgrader": False,
    "nbgrader.server_extensions.course_list": False,
    "nbgrader.server_extensions.assignment_list": True,
    "nbgrader.server_extensions.validate_assignment": True,
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _release_files() -> list[Path]:
    """The release's files under ``notebooks/`` (relative), as git would hand them out: not
    what :func:`grader.grading.release.release_ignores` names (checkpoints, caches)."""
    from grader.grading.release import release_ignores

    patterns = release_ignores()
    out = []
    for path in sorted(course.NOTEBOOKS.rglob("*")):
        rel = path.relative_to(course.NOTEBOOKS)
        if path.is_file() and not any(
            fnmatch.fnmatch(part, p) for part in rel.parts for p in patterns
        ):
            out.append(rel)
    return out


def offered_name(rel: Path) -> Path:
    """Where a newer release of ``rel`` is put when the student changed their copy."""
    return rel.with_name(f"{rel.stem}.new-release{rel.suffix}")


def fill(workspace: Path) -> list[str]:
    """Copy the release into ``workspace`` without losing a student's work (module docstring).

    Returns:
        One line per file offered beside the student's (``notebooks/...: a newer release is in
        ...``), for the command to print.
    """
    workspace = Path(workspace)
    notebooks = workspace / "notebooks"
    notebooks.mkdir(parents=True, exist_ok=True)
    record_file = workspace / RECORD
    record: dict[str, str] = json.loads(record_file.read_text()) if record_file.is_file() else {}
    offered = []
    for rel in _release_files():
        released, mine = course.NOTEBOOKS / rel, notebooks / rel
        new = _sha(released)
        key = rel.as_posix()
        if not mine.exists():
            mine.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(released, mine)
            record[key] = new
        elif record.get(key) == new:
            continue  # this release is the one the student has (changed or not)
        elif key in record and _sha(mine) == record[key]:
            shutil.copyfile(released, mine)  # unchanged by the student: take the newer release
            record[key] = new
        elif _sha(mine) == new:
            record[key] = new
        else:  # the student's own version: keep it, offer the release beside it
            beside = notebooks / offered_name(rel)
            if not beside.exists() or _sha(beside) != new:
                shutil.copyfile(released, beside)
            offered.append(f"notebooks/{key}: a newer release is in notebooks/{offered_name(rel)}")
    record_file.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    images = workspace / "images"
    if not images.is_dir() or filecmp.dircmp(course.IMAGES, images).diff_files:
        shutil.copytree(course.IMAGES, images, dirs_exist_ok=True)
    return offered


def write_student_config(workspace: Path) -> Path:
    """The student's Jupyter configuration in ``<workspace>/.jupyter/`` (see the module
    docstring); returns that folder (for ``JUPYTER_CONFIG_DIR``)."""
    config = Path(workspace) / CONFIG
    (config / "labconfig").mkdir(parents=True, exist_ok=True)
    (config / "jupyter_server_config.py").write_text(
        '"""A student\'s JupyterLab (written by `python -m grader start`; rewritten each start)."""\n\n'
        "c = get_config()  # noqa: F821\n"
        f"c.ServerApp.root_dir = {str(Path(workspace).resolve())!r}\n"
        "c.ServerApp.allow_root = True  # containers and cloud machines that run as root\n"
        'c.LabApp.default_url = "/lab/tree/notebooks/01_devices/01_devices.ipynb"\n'
        "c.LabApp.news_url = None\n"
        f"c.ServerApp.jpserver_extensions = {dict(STUDENT_SERVER_EXTENSIONS)!r}\n"
    )
    (config / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": dict.fromkeys(STUDENT_DISABLED_PLUGINS, True)}, indent=2)
        + "\n"
    )
    # Validate runs the course's test cells as the course's nbgrader configuration says.
    (config / "nbgrader_config.py").write_text(
        '"""A student\'s nbgrader settings (written by `python -m grader start`): the course\'s."""\n\n'
        "from grader.grading.config import course_config\n\n"
        "c = get_config()  # noqa: F821\n"
        "c.merge(course_config())\n"
    )
    return config


def user_settings(settings: Path) -> None:
    """JupyterLab's user settings a student starts with, where the student has none: no news
    prompt on the first start (``fetchNews``: the notification plugin asks otherwise)."""
    news = (
        Path(settings) / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    )
    if not news.exists():
        news.parent.mkdir(parents=True, exist_ok=True)
        news.write_text(json.dumps({"fetchNews": "false"}) + "\n")


def lab_command(workspace: Path, lab_args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The ``jupyter lab`` command and environment that :func:`start` runs."""
    workspace = Path(workspace).resolve()
    config = write_student_config(workspace)
    env = dict(os.environ)
    env["JUPYTER_CONFIG_DIR"] = str(config)
    env["JUPYTER_CONFIG_PATH"] = str(config)  # not grader/: that is the instructor's Lab
    settings = Path(env.setdefault("JUPYTERLAB_SETTINGS_DIR", str(config / "lab-user-settings")))
    env.setdefault("JUPYTERLAB_WORKSPACES_DIR", str(config / "lab-workspaces"))
    user_settings(settings)
    jupyter = Path(sys.executable).with_name("jupyter")
    command = [str(jupyter) if jupyter.exists() else "jupyter", "lab", *lab_args]
    return command, env


def start(workspace: Path | None, lab_args: list[str]) -> int:
    """Fill the workspace, say where it is, and replace this process by JupyterLab on it."""
    workspace = Path(workspace or DEFAULT_WORKSPACE).resolve()
    offered = fill(workspace)
    print(f"Your workspace: {workspace} (your notebooks are in its notebooks/ folder).")
    for line in offered:
        print(f"  {line}")
    command, env = lab_command(workspace, lab_args)
    sys.stdout.flush()
    os.execvpe(command[0], command, env)
    return 0  # not reached
