"""The course on JupyterHub, on one machine: real Unix accounts, one server per person.

``hub.py`` prepares and starts a demo class (``python -m grader hub --demo``): the accounts,
a world-readable Python environment the students' servers run, nbgrader's shared exchange and
each role's Jupyter configuration; ``jupyterhub_config.py`` is the hub's configuration it
starts JupyterHub with. The Helm values and Dockerfile beside them are recipes for Zero to
JupyterHub on Kubernetes (not tested here; see the README).

May import: :mod:`grader.runtime` and :mod:`grader.grading` (the course's nbgrader
configuration). Nothing of the course imports it but ``grader/__main__.py`` (the command line).
"""
