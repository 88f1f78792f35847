"""The instructor's and developer's tools on top of the grading engine: ``measure`` (the course's
GPU figures), ``verify`` (``verify-gpu``, the plan for a GPU machine), ``bench`` (grading time),
``demo`` (the whole flow on the sample class), ``samples`` (the sample submissions of
``grader/samples/``: parsed, built into submissions, graded in-process by the tests) and
``mutants`` (mutation testing of the graders: which wrong answers still get full marks).

May import: :mod:`grader.runtime`, :mod:`grader.checks`, :mod:`grader.grading` and other modules
of this package. Only ``grader/__main__.py`` (the command line) sits above it
(``tests/test_layout.py``).
"""
