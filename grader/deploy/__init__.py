"""Running the course beyond one JupyterLab: ``jupyterhub/`` (``python -m grader hub``: the course
on JupyterHub on one machine, and recipes for Zero to JupyterHub), and recipes for grading a class
on a cluster (``k8s-autograde-job.yaml``, ``slurm-autograde.sbatch``).

May import: :mod:`grader.runtime` and :mod:`grader.grading`. Only ``grader/__main__.py`` (the
command line) sits above it (``tests/test_layout.py``).
"""
