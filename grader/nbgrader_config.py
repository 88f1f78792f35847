"""nbgrader configuration of the course, for nbgrader's command line and JupyterLab extension.

They find it when ``JUPYTER_CONFIG_PATH`` includes this folder, as the README's commands set:
``JUPYTER_CONFIG_PATH=grader nbgrader autograde ...``. The course's own commands
(``python -m grader ...``) build the same configuration in Python (:mod:`grader.grading.config`), so
every way of grading judges test cells in the grading process and scores a CUDA check that
could not run 0. ``GPU_COURSE_WORK`` names another working folder than ``grader/work``
(gradebook, submissions, exchange): a second class, or a test.
"""

import os

from grader.grading.config import course_config, prepare_work_folders

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file
c.merge(course_config(work=os.environ.get("GPU_COURSE_WORK") or None))
# A fresh clone has no grader/work yet: without it the formgrader cannot create its gradebook.
prepare_work_folders(c)
