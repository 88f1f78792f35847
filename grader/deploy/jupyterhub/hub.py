"""Prepare and start the course on JupyterHub on this machine: ``python -m grader hub --demo``.

What :func:`prepare` sets up under the hub's folder (default ``/srv/gpu-course-hub``):

- ``env/``: the Python environment every server runs. The course's ``.venv`` is often made from
  a Python only its owner can read (here ``/root/.pyenv``, mode 700), so a student's server
  started from it fails with "Permission denied". ``env/`` is a venv of that interpreter (copied
  to ``python/`` when it is private) that adds the course's site-packages through a ``.pth``
  file, with launchers for their commands and JupyterLab's assets linked in.
- ``exchange/``: nbgrader's shared exchange, world-writable as nbgrader's documentation asks
  (``chmod ugo+rw``); nbgrader makes the course's ``inbound/`` write-only for students itself.
- ``config/instructor/`` and ``config/student/``: each role's Jupyter and nbgrader
  configuration. The instructor gets the formgrader and the course's nbgrader configuration
  (:func:`grader.grading.config.course_config`, so autograde uses the course's preprocessors)
  on a copy of ``solutions/`` and ``notebooks/`` in ``~/course``; a student gets the
  Assignment List and Validate, without the Create Assignment sidebar, the formgrader and
  JupyterLab's news prompt.
- the accounts (as root only): the instructor and the students, real Unix users with private
  home folders (mode 700) and the given password, logged in through PAM.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from grader.deploy.workspace import STUDENT_DISABLED_PLUGINS  # the same as `grader start`'s
from grader.grading.config import COURSE_ID
from grader.runtime import course

HERE = Path(__file__).resolve().parent
DEFAULT_ROOT = Path("/srv/gpu-course-hub")
DEMO_STUDENTS = ("student1", "student2")
DEMO_INSTRUCTOR = "instructor"
NBGRADER_SERVER_EXTENSIONS = ("formgrader", "course_list", "assignment_list", "validate_assignment")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _readable_by_all(path: Path) -> bool:
    """Whether every account can reach ``path`` (each folder above it searchable by others)."""
    return all(p.stat().st_mode & 0o005 == 0o005 for p in [path, *path.parents] if p.is_dir())


def base_python(root: Path) -> Path:
    """The course's interpreter, or where it is private (``/root/.pyenv``, mode 700) a copy of it
    in ``root/python``: the standard library and ``libpython`` without its site-packages (a few
    tens of MB). Debian's ``/usr/bin/python3`` 3.11.2 would also be readable, but its ``re``
    mis-parses possessive quantifiers, which soupsieve uses: nbgrader's feedback fails on it."""
    base = Path(sys.base_prefix)
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    if _readable_by_all(base / "bin"):
        return base / "bin" / name
    copy = root / "python"
    if not (copy / "bin" / name).exists():
        skip = shutil.ignore_patterns("site-packages", "test", "__pycache__", "idlelib", "tkinter")
        (copy / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy2(base / "bin" / name, copy / "bin" / name)
        shutil.copytree(base / "lib", copy / "lib", ignore=skip, symlinks=True, dirs_exist_ok=True)
        (copy / "lib" / name / "site-packages").mkdir(exist_ok=True)
        if (base / "include").is_dir():
            shutil.copytree(base / "include", copy / "include", dirs_exist_ok=True)
    return copy / "bin" / name


def library_path(root: Path) -> str:
    """``LD_LIBRARY_PATH`` for the copied interpreter (its RUNPATH names the private original)."""
    return str(root / "python" / "lib") if (root / "python" / "lib").is_dir() else ""


def make_environment(env: Path) -> None:
    """A venv every account can run, with the course's installed packages (see :func:`base_python`)."""
    site = Path(sysconfig.get_paths()["purelib"])
    python = base_python(env.parent)
    run_env = {**os.environ, "LD_LIBRARY_PATH": library_path(env.parent)}
    if not (env / "bin" / "python").exists():
        subprocess.run(
            [str(python), "-m", "venv", "--without-pip", str(env)], check=True, env=run_env
        )
    env_site = Path(
        subprocess.run(
            [
                str(env / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
            check=True,
            env=run_env,
        ).stdout.strip()
    )
    _write(env_site / "gpu_course.pth", f"import site; site.addsitedir({str(site)!r})\n")
    # Launchers for the course's commands (jupyter, nbgrader, alembic, ...) on this interpreter.
    for dist in metadata.distributions(path=[str(site)]):
        for ep in dist.entry_points.select(group="console_scripts"):
            head = ep.attr.split(".")[0] if ep.attr else None
            call = ep.attr or ep.module
            body = (
                f"#!{env / 'bin' / 'python'}\nimport sys\n"
                + (f"from {ep.module} import {head}\n" if head else f"import {ep.module}\n")
                + f"sys.exit({call}())\n"
            )
            _write(env / "bin" / ep.name, body, 0o755)
    # JupyterLab's assets and extensions from the course's environment; settings of our own.
    share = Path(sys.prefix) / "share" / "jupyter"
    lab = env / "share" / "jupyter" / "lab"
    lab.mkdir(parents=True, exist_ok=True)
    for name in ("static", "schemas", "themes"):
        if not (lab / name).exists():
            (lab / name).symlink_to(share / "lab" / name)
    for entry in share.iterdir():  # labextensions, nbconvert's templates (the formgrader's), ...
        if entry.name != "lab" and not (env / "share" / "jupyter" / entry.name).exists():
            (env / "share" / "jupyter" / entry.name).symlink_to(entry)
    news_off = {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false"}}
    _write(lab / "settings" / "overrides.json", json.dumps(news_off, indent=2) + "\n")


def _server_config(enabled: set[str]) -> str:
    extensions = {"jupyterlab": True, "jupyter_server_terminals": True, "notebook_shim": True}
    for name in NBGRADER_SERVER_EXTENSIONS:
        extensions[f"nbgrader.server_extensions.{name}"] = name in enabled
    return (
        '"""Jupyter Server settings of this role on the course\'s hub (written by grader hub)."""\n\n'
        "c = get_config()  # noqa: F821\n"
        f"c.ServerApp.jpserver_extensions = {extensions!r}\n"
        "c.LabApp.news_url = None  # no news feed: no 'fetch news?' prompt on first start\n"
    )


def write_role_configs(root: Path) -> None:
    """``config/student/`` and ``config/instructor/``: Jupyter Server, JupyterLab, nbgrader."""
    exchange = root / "exchange"
    student = root / "config" / "student"
    _write(
        student / "jupyter_server_config.py",
        _server_config({"assignment_list", "validate_assignment"}),
    )
    _write(
        student / "labconfig" / "page_config.json",
        json.dumps({"disabledExtensions": dict.fromkeys(STUDENT_DISABLED_PLUGINS, True)}, indent=2)
        + "\n",
    )
    _write(
        student / "nbgrader_config.py",
        '"""A student\'s nbgrader settings on the course\'s hub: the course and its exchange."""\n\n'
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
        "c.Exchange.path_includes_course = True\n",
    )
    instructor = root / "config" / "instructor"
    _write(instructor / "jupyter_server_config.py", _server_config(set(NBGRADER_SERVER_EXTENSIONS)))
    _write(
        instructor / "nbgrader_config.py",
        '"""The instructor\'s nbgrader settings on the course\'s hub (written by grader hub): the\n'
        "course's configuration (formgrader, autograde with the course's preprocessors) on the\n"
        'copy of the course in ~/course, and the hub\'s shared exchange."""\n\n'
        "from pathlib import Path\n\n"
        "from grader.grading.config import course_config, scripts_on_path\n\n"
        "c = get_config()  # noqa: F821\n"
        'COURSE = Path.home() / "course"\n'
        'c.merge(course_config(work=COURSE / "work"))\n'
        "c.CourseDirectory.root = str(COURSE)\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
        "scripts_on_path()  # nbgrader runs alembic to create the gradebook\n"
        'for name in ("autograded", "feedback", "submitted"):\n'
        '    (COURSE / "work" / name).mkdir(parents=True, exist_ok=True)\n',
    )


def make_account(name: str, password: str) -> None:
    """A Unix account with a private home folder and ``password`` (root only)."""
    try:
        pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", name], check=True)
    home = Path(pwd.getpwnam(name).pw_dir)
    home.chmod(0o700)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)


def give_instructor_the_course(name: str) -> None:
    """Copy ``solutions/`` and ``notebooks/`` to the instructor's ``~/course`` (theirs to edit)."""
    user = pwd.getpwnam(name)
    target = Path(user.pw_dir) / "course"
    for part in ("solutions", "notebooks"):
        if not (target / part).exists():
            shutil.copytree(course.REPO / part, target / part)
    for path in [target, *target.rglob("*")]:
        os.chown(path, user.pw_uid, user.pw_gid)


def proxy_command() -> str | None:
    """The configurable-http-proxy command, or None where it is not installed."""
    return shutil.which("configurable-http-proxy")


def install_proxy() -> None:
    """``npm install -g configurable-http-proxy`` where npm is present and the proxy is not."""
    if proxy_command():
        return
    npm = shutil.which("npm")
    if not npm:
        raise RuntimeError(
            "JupyterHub needs configurable-http-proxy: install Node.js and npm, then"
            " npm install -g configurable-http-proxy"
        )
    subprocess.run([npm, "install", "-g", "configurable-http-proxy@5"], check=True)


def prepare(
    root: Path = DEFAULT_ROOT,
    instructor: str = DEMO_INSTRUCTOR,
    students: tuple[str, ...] = DEMO_STUDENTS,
    password: str | None = None,
    log=print,
) -> str | None:
    """Set up the hub's folder and, as root, the accounts; return the demo password (if made)."""
    install_proxy()
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)
    (root / "state").mkdir(exist_ok=True)
    (root / "state").chmod(0o700)
    make_environment(root / "env")
    exchange = root / "exchange"
    exchange.mkdir(exist_ok=True)
    exchange.chmod(0o777)  # nbgrader's docs: chmod ugo+rw on the exchange
    write_role_configs(root)
    if os.geteuid() != 0:
        log(
            "Not root: no accounts were made. Log in with existing Unix accounts named "
            f"{instructor} (instructor) and {', '.join(students)}; their servers start as them "
            "only if the hub itself runs as root."
        )
        return None
    password = password or secrets.token_urlsafe(9)
    for name in (instructor, *students):
        make_account(name, password)
    give_instructor_the_course(instructor)
    log(
        f"Accounts {instructor} (instructor), {', '.join(students)} (students); password: {password}"
    )
    return password


def hub_environment(root: Path, instructor: str, students: tuple[str, ...], port: int) -> dict:
    """The environment ``jupyterhub -f jupyterhub_config.py`` reads its settings from."""
    return {
        **os.environ,
        "GPU_COURSE_HUB_ROOT": str(root),
        "GPU_COURSE_HUB_INSTRUCTOR": instructor,
        "GPU_COURSE_HUB_STUDENTS": ",".join(students),
        "GPU_COURSE_HUB_PORT": str(port),
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }


def hub_command() -> list[str]:
    """The command that starts JupyterHub with the course's configuration."""
    return [sys.executable, "-m", "jupyterhub", "-f", str(HERE / "jupyterhub_config.py")]


def run(
    root: Path, instructor: str, students: tuple[str, ...], port: int, password: str | None
) -> int:
    """Prepare, then run JupyterHub in the foreground on http://127.0.0.1:<port> until stopped."""
    prepare(root, instructor, students, password)
    print(f"JupyterHub on http://127.0.0.1:{port} (loopback; Ctrl-C stops it)")
    env = hub_environment(root, instructor, students, port)
    # JupyterHub replaces this process, so a signal to it (Ctrl-C, kill, a timeout) reaches the
    # hub, which then stops its proxy and the servers it started.
    os.chdir(root / "state")
    command = hub_command()
    os.execve(command[0], command, env)
