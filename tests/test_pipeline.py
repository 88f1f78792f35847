"""The instructor pipeline with the real nbgrader: the sample class autograded once
(reference, blank, every mistake, every written-differently answer), then the CLI's
refusals, feedback and CSV export. Slow (minutes): it runs nbgrader autograde."""

import csv
import subprocess
import sys

import pytest
import torch

from grader.grading import pipeline
from grader.grading.release import student_copy
from grader.runtime import course
from grader.tools import samples

from .helpers import autograde_flags, run_demo

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # the module fixture grades a class
GPU = torch.cuda.is_available()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`python -m grader demo --class core` run once, as an instructor runs it, keeping its folder:
    per assignment the reference, the blank copy, and one mistake and one correct alternative per
    exercise (52 notebooks; the whole class is `tests/test_whole_class.py`, marker
    `whole_class`). Two submissions at a time."""
    return run_demo(tmp_path_factory.mktemp("demo"), "core")


def test_demo_exits_zero_and_prints_the_table(demo):
    proc = demo["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Every score is as expected." in proc.stdout
    assert "reference" in proc.stdout and "blank" in proc.stdout


@pytest.mark.parametrize("aid", course.assignments())
def test_reference_gets_every_point_this_machine_can_check(demo, aid):
    r = demo["cells"][("reference", aid)]
    nb = course.read(course.source_path(aid))
    cuda_points = sum(t.points for t in course.test_cells(nb) if t.needs_cuda)
    assert r["max_score"] == sum(t.points for t in course.test_cells(nb))
    assert r["score"] == r["max_score"] - (0 if GPU else cuda_points)
    assert sorted(r["not_checked"]) == (
        [] if GPU else sorted(t.grade_id for t in course.test_cells(nb) if t.needs_cuda)
    )


@pytest.mark.parametrize("aid", course.assignments())
def test_blank_copy_gets_zero(demo, aid):
    assert demo["cells"][("blank", aid)]["score"] == 0


@pytest.mark.parametrize("aid", course.assignments())
def test_every_mistake_loses_exactly_its_points_and_every_alternative_gets_full_marks(demo, aid):
    reference = demo["cells"][("reference", aid)]
    students = [
        st
        for st in samples.demo_class([aid], "core", GPU)
        if st.name.startswith(("mistakes_", "alternative_"))
    ]
    assert any(s.name.startswith("mistakes_") for s in students) and any(
        s.name.startswith("alternative_") for s in students
    )
    for st in students:
        r = demo["cells"][(st.name, aid)]
        assert r["ok"], (
            f"{st.name}/{aid}: failed {r['failed_cells']}, expected {r['expected_failed_cells']}"
        )
        if st.name.startswith("mistakes_"):
            assert r["score"] < reference["score"], (
                f"{st.name} ({st.samples}) lost no points on this machine"
            )
        else:
            assert r["score"] == reference["score"]


def test_the_core_class_has_a_mistake_and_an_alternative_for_every_exercise(demo):
    """What the default test command proves: every exercise with samples has one mistake and one
    correct alternative graded by nbgrader (the whole class: `tests/test_whole_class.py`)."""
    graded = {name for st in samples.demo_class(kind="core", gpu=GPU) for name in st.samples}
    assert graded <= {
        f"{aid}/{s.name}" for aid in course.assignments() for s in samples.load_samples(aid)
    }
    for aid in course.assignments():
        mine = [s for s in samples.load_samples(aid) if f"{aid}/{s.name}" in graded]
        for exercise in {cell for s in samples.load_samples(aid) for cell in s.cells}:
            kinds = {s.is_mistake for s in samples.load_samples(aid) if exercise in s.cells}
            assert kinds <= {s.is_mistake for s in mine if exercise in s.cells}, (aid, exercise)
        assert {st.name for st in samples.demo_class([aid], "core", GPU)} >= {"reference", "blank"}
    assert {(r[0], r[1]) for r in demo["cells"]} == {
        (st.name, aid) for st in samples.demo_class(kind="core", gpu=GPU) for aid in st.notebooks
    }


def test_feedback_and_csv_export(demo):
    work = demo["work"]
    for aid in course.assignments():
        html = (work / "feedback" / "reference" / aid / f"{aid}.html").read_text()
        grade_ids = [t.grade_id for t in course.test_cells(course.read(course.source_path(aid)))]
        assert all(g in html for g in grade_ids), f"feedback for {aid} lacks some test cells"
    rows = list(csv.DictReader((work / "grades.csv").open()))
    assert {(r["student_id"], r["assignment"]) for r in rows} >= {
        ("reference", a) for a in course.assignments()
    }
    blank = [r for r in rows if r["student_id"] == "blank"]
    assert blank and all(float(r["score"]) == 0 for r in blank)


def test_cli_export_and_feedback_against_the_kept_gradebook(demo, tmp_path):
    out = tmp_path / "grades.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "export", "--work", str(demo["work"]), "--to", str(out)],
        capture_output=True,
        text=True,
        cwd=course.REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("assignment,duedate,timestamp,student_id")


@pytest.mark.skipif(GPU, reason="the refusal is for machines without a GPU")
def test_autograde_refuses_without_gpu_unless_told(tmp_path):
    submitted = tmp_path / "submitted"
    samples.write_class(
        [st for st in samples.demo_class(["02_async"]) if st.name == "reference"], submitted
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "autograde",
            str(submitted),
            "--work",
            str(tmp_path / "work"),
            *autograde_flags(),
        ],
        capture_output=True,
        text=True,
        cwd=course.REPO,
    )
    assert proc.returncode == 2
    assert (
        "no CUDA GPU" in proc.stderr
        and "--cpu-ok" in proc.stderr
        and "test_time_gpu_cuda" in proc.stderr
    )


def test_cli_reports_usage_errors_clearly(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "feedback", "--work", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=course.REPO,
    )
    assert proc.returncode == 2 and "nothing autograded" in proc.stderr
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "autograde",
            str(tmp_path / "missing"),
            "--cpu-ok",
            *autograde_flags(),
        ],
        capture_output=True,
        text=True,
        cwd=course.REPO,
    )
    assert proc.returncode == 2 and "no submissions folder" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "release", "99_nope", "--check"],
        capture_output=True,
        text=True,
        cwd=course.REPO,
    )
    assert proc.returncode == 2 and "unknown assignment" in proc.stderr


def test_release_check_cli_passes_on_the_committed_release():
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "release", "--check"],
        capture_output=True,
        text=True,
        cwd=course.REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "in sync" in proc.stdout


def test_not_checked_cells_are_read_from_outputs():
    nb = course.read(student_copy("02_async"))
    cell = next(
        c for c in nb.cells if course.nbgrader_meta(c).get("grade_id") == "test_time_gpu_cuda"
    )
    cell.outputs = [
        {"output_type": "error", "ename": "NotCheckedWithoutCuda", "evalue": "x", "traceback": []}
    ]
    assert pipeline.not_checked_cells(nb) == ["test_time_gpu_cuda"]


def test_a_fresh_working_folder_gets_a_gradebook(tmp_path):
    """The formgrader opens the gradebook from grader/nbgrader_config.py; in a fresh clone
    grader/work does not exist, and sqlite cannot create a database in a missing folder."""
    from nbgrader.api import Gradebook
    from traitlets.config.loader import PyFileConfigLoader

    work = tmp_path / "fresh" / "work"
    config = pipeline.course_config(work=work)
    pipeline.prepare_work_folders(config)
    with Gradebook(config.CourseDirectory.db_url) as gradebook:
        assert gradebook.assignments == []
    assert (work / "gradebook.db").is_file()
    assert (work / "autograded").is_dir() and (work / "feedback").is_dir()

    # the file Jupyter loads gives the course's configuration and makes the working folder
    loaded = PyFileConfigLoader(
        "nbgrader_config.py", path=str(course.REPO / "grader")
    ).load_config()
    assert loaded.CourseDirectory.db_url == pipeline.course_config().CourseDirectory.db_url
    assert course.WORK.is_dir()
