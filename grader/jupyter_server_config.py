"""The instructor's JupyterLab settings, loaded when ``JUPYTER_CONFIG_PATH`` includes this folder
(the README's instructor command sets it; students use ``python -m grader start``, whose
configuration is :mod:`grader.deploy.workspace`'s).

The server's root is the repository, so the notebooks' links to ``images/`` resolve, and
JupyterLab opens on ``notebooks/``. ``allow_root`` lets the course start in containers and
cloud machines that run everything as root. No news feed, so JupyterLab does not ask on first
start whether to fetch the project's news (a prompt over the course's first page).
"""

from pathlib import Path

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file
c.ServerApp.root_dir = str(Path(__file__).resolve().parent.parent)
c.LabApp.default_url = "/lab/tree/notebooks"
c.ServerApp.allow_root = True
c.LabApp.news_url = None
