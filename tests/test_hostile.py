"""A hostile class costs no one else anything (issue 39): the static scan flags every import of
the course's package a notebook does not make itself, kernels get quotas of their own (disk,
processes, CPU share), the grading side's logs are capped, the audit channel is verified, and
nothing a kernel's children can read holds the instructor's paths. Fast unit tests; the class
round with a disk filler, a fork bomb, a CPU hog and a log flooder is in tests/test_grading.py."""

from __future__ import annotations

import pytest

from grader.grading import scan
from grader.runtime import course


# ----------------------------------------------------------------------------- the static scan
def test_the_course_modules_are_found_by_walking_the_package():
    modules = scan.course_modules()
    for name in ("grader.checks.ch01_devices", "grader.runtime.course", "grader.grading.judge",
                 "grader.checks.ch13_parallelism.tensor", "grader.grading.guard"):  # fmt: skip
        assert name in modules
    assert all(m == "grader" or m.startswith("grader.") for m in modules)


@pytest.mark.parametrize("aid", course.assignments())
def test_every_course_module_a_notebook_does_not_import_is_flagged(aid):
    """A student's cell importing any module of the package (an oracle in the checks, the
    grading modules), or a name the notebook itself does not import, is a finding; what the
    notebook imports in its own cells is not."""
    allowed = scan.course_imports(aid)
    allowed_modules = {m for m, _ in allowed}
    for module in scan.course_modules():
        found = scan.scan_source(f"import {module}\n", assignment=aid)
        assert bool(found) == (module not in allowed_modules), (aid, module)
        found = scan.scan_source(f"from {module} import _expected_value\n", assignment=aid)
        assert found, (aid, module)
    for module, name in allowed:
        source = f"from {module} import {name}\n" if name else f"import {module}\n"
        assert scan.scan_source(source, assignment=aid) == [], (aid, module, name)


def test_an_oracle_import_is_flagged_however_it_is_written():
    sources = [
        "from grader.checks.ch01_devices import _expected_simulated",
        "import grader.checks.ch01_devices as c",
        "from grader.checks import ch01_devices",
        "from grader import checks",
        "from grader.runtime.course import reference",
        "from grader.grading import judge",
    ]
    for source in sources:
        assert scan.scan_source(source, assignment="01_devices"), source
