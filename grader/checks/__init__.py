"""The checks that the notebooks' test cells call: one module per notebook (``ch01_devices`` ...
``ch12_triton``) and what they share (:mod:`~grader.checks.common`: teaching failure messages,
CUDA-only checks, partial credit).

A check takes the student's function (or a :class:`grader.runtime.remote.Handle` to it), runs it
on chosen inputs and raises :class:`~grader.checks.common.CheckFailed` with a message that names
the likely cause.

May import: :mod:`grader.runtime` and other modules of this package. Never :mod:`grader.grading`
or :mod:`grader.tools` (``tests/test_layout.py``).
"""
