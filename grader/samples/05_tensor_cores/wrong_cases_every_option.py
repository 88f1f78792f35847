"""CASE_FINDINGS lists every problem for every case (a guess): each wrong pick cancels a right
one, so it scores 0."""

# fails: test_case_findings
# %% case_findings
from grader.checks.ch05_tensor_cores import PROBLEMS

CASE_FINDINGS = {case: set(PROBLEMS) for case in ("case1", "case2", "case3")}
