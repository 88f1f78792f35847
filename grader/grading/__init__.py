"""The trusted grading engine: release, autograde, feedback and export on top of nbgrader.

Lives here: the release step (:mod:`~grader.grading.release`), the instructor pipeline
(:mod:`~grader.grading.pipeline`), the class engine and its jobs (:mod:`~grader.grading.grading`,
:mod:`~grader.grading.job`, :mod:`~grader.grading.ray_engine`, :mod:`~grader.grading.merge`), the
notebook executor and the judge that decides test cells in the grading process
(:mod:`~grader.grading.execute`, :mod:`~grader.grading.judge`), what a submission may and may not
do (:mod:`~grader.grading.intake`, :mod:`~grader.grading.scan`, :mod:`~grader.grading.isolation`,
:mod:`~grader.grading.sandbox`, :mod:`~grader.grading.guard`), the course's nbgrader configuration
(:mod:`~grader.grading.config`, :mod:`~grader.grading.options`) and the report
(:mod:`~grader.grading.report`).

May import: :mod:`grader.runtime`, :mod:`grader.checks` and other modules of this package. Never
:mod:`grader.tools` (``tests/test_layout.py``). A graded kernel imports
:mod:`~grader.grading.guard` at start-up, so this file imports nothing.
"""
