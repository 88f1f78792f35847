"""nbgrader configuration of the course, for nbgrader's command line and JupyterLab extension.

They find it when ``JUPYTER_CONFIG_PATH`` includes this folder, as the README's commands set:
``JUPYTER_CONFIG_PATH=grader nbgrader autograde ...``. The course's own commands
(``python -m grader ...``) build the same configuration in Python.
"""

from grader.pipeline import course_config, prepare_work_folders

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file
c.merge(course_config())
# A fresh clone has no grader/work yet: without it the formgrader cannot create its gradebook.
prepare_work_folders(c)
