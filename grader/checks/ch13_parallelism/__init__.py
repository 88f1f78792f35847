"""Checks for 13_parallelism, one module a part of the notebook:

* :mod:`.tensor`: tensor and sequence parallelism (``ColumnRowMLP``, ``SequenceParallelMLP``);
* :mod:`.pipeline`: pipeline parallelism (``bubble_fraction``, ``measured_bubble``);
* :mod:`.communication`: collectives measured and utilization (``bus_bandwidth``, ``mfu``).

Test cells import each check from its module (``from grader.checks.ch13_parallelism.tensor
import check_column_row_mlp``); each module says ``JUDGED_IN_GRADER``. Importing this package
imports all three, so the grading guard, which imports ``grader.checks.ch13_parallelism`` before
a student's code runs, has every probe in its snapshot. May import ``grader.checks.common`` and
``grader.runtime``.
"""

from grader.checks.ch13_parallelism import communication, pipeline, tensor  # noqa: F401

ASSIGNMENT = "13_parallelism"
