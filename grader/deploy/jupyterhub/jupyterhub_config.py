"""JupyterHub configuration of the course's demo class, written for ``python -m grader hub``.

Read by ``jupyterhub -f``; everything it needs comes from environment variables set by
:mod:`grader.deploy.jupyterhub.hub`: ``GPU_COURSE_HUB_ROOT`` (the hub's folder: state, the
students' Python environment, the role configurations), ``GPU_COURSE_HUB_INSTRUCTOR``,
``GPU_COURSE_HUB_STUDENTS`` (comma-separated Unix accounts), ``GPU_COURSE_HUB_PORT``.

Accounts are real Unix users (PAM logs them in, LocalProcessSpawner starts each server as its
user). The instructor's server loads the course's nbgrader configuration (formgrader, autograde
with the course's preprocessors); a student's loads only the Assignment List and Validate.
"""

import os
from pathlib import Path

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

ROOT = Path(os.environ["GPU_COURSE_HUB_ROOT"])
INSTRUCTOR = os.environ["GPU_COURSE_HUB_INSTRUCTOR"]
STUDENTS = [s for s in os.environ.get("GPU_COURSE_HUB_STUDENTS", "").split(",") if s]
ENV = ROOT / "env"

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(os.environ.get("GPU_COURSE_HUB_PORT", "8000"))
c.JupyterHub.hub_ip = "127.0.0.1"
# The hub's API and the proxy's on the next two ports, so two hubs (a test's) do not clash.
c.JupyterHub.hub_port = c.JupyterHub.port + 1
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{c.JupyterHub.port + 2}"
c.JupyterHub.cookie_secret_file = str(ROOT / "state" / "jupyterhub_cookie_secret")
c.JupyterHub.db_url = f"sqlite:///{ROOT / 'state' / 'jupyterhub.sqlite'}"
c.ConfigurableHTTPProxy.pid_file = str(ROOT / "state" / "jupyterhub-proxy.pid")

c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = {INSTRUCTOR, *STUDENTS}
c.Authenticator.admin_users = {INSTRUCTOR}

c.JupyterHub.spawner_class = "jupyterhub.spawner.LocalProcessSpawner"
# The students' environment: the course's interpreter where every account can read it (or a
# copy), the course's packages through a .pth file; see hub.make_environment.
c.Spawner.cmd = [str(ENV / "bin" / "python"), "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120


def _role_environment(spawner) -> None:
    """Point each server at its role's Jupyter and nbgrader configuration."""
    role = "instructor" if spawner.user.name == INSTRUCTOR else "student"
    spawner.environment.update(
        {
            "JUPYTER_CONFIG_PATH": str(ROOT / "config" / role),
            "JUPYTERLAB_DIR": str(ENV / "share" / "jupyter" / "lab"),
            "JUPYTER_PATH": str(ENV / "share" / "jupyter"),
            "PATH": f"{ENV / 'bin'}:/usr/local/bin:/usr/bin:/bin",
            # the copied interpreter's libpython (hub.base_python); empty when not copied
            "LD_LIBRARY_PATH": str(ROOT / "python" / "lib") if (ROOT / "python").is_dir() else "",
        }
    )


c.Spawner.pre_spawn_hook = _role_environment
