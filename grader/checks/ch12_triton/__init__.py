"""Checks for 12_triton, one module a part of the notebook:

* :mod:`.kernels`: Exercises 1-4 (``bias_gelu``, ``softmax_rows``, ``matmul``,
  ``attention_forward``): values, bytes and lanes counted under Triton's interpreter on cases
  drawn from each statement's whole domain, every kernel compiled for sm_90 and sm_80
  (:mod:`grader.runtime.triton_compile`), and the ``_cuda`` checks on a GPU;
* :mod:`.backward`: Exercise 5 (``attention_forward_lse``, ``attention_backward``,
  ``flash_attention``): FlashAttention's backward, its gradients, bytes and races
  (``Traffic.races``), judged alike.

Test cells import each check from this package (``from grader.checks.ch12_triton import
check_matmul``), which re-exports every public name of its modules; each module says
``JUDGED_IN_GRADER``. Importing this package imports every module, so the grading guard, which
imports ``grader.checks.ch12_triton`` before a student's code runs, has every probe in its
snapshot. May import ``grader.checks.common`` and ``grader.runtime``.
"""

from grader.checks.ch12_triton import kernels  # noqa: F401
from grader.checks.ch12_triton.backward import *  # noqa: F401,F403 - Exercise 5
from grader.checks.ch12_triton.kernels import *  # noqa: F401,F403
from grader.checks.ch12_triton.kernels import (  # noqa: F401 - the tests' and demos' names
    ROLES,
    make_inputs,
)

ASSIGNMENT = "12_triton"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True
