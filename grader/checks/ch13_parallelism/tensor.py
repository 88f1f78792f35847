"""Checks for 13_parallelism, part: tensor (being written)."""

from __future__ import annotations

ASSIGNMENT = "13_parallelism"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True
