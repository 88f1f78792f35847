"""The whole nbgrader flow with nbgrader's own command line, from a fresh working folder: the
instructor generates and releases an assignment into the course-local exchange, a student fetches
it, answers and submits, the instructor collects, autogrades (plain ``nbgrader autograde``, no
course command), generates and releases feedback, and the student fetches it. The course's
configuration (grader/nbgrader_config.py) makes plain nbgrader judge test cells in the grading
process: the blank notebook scores 0, CUDA cells without a GPU score 0 and say so.
Slow (about two minutes)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from nbgrader.api import Gradebook
from nbgrader.utils import get_username

from grader.checks.common import GRADING_ENV
from grader.grading.config import COURSE_ID
from grader.runtime import course
from grader.tools import samples

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
A = "01_devices"
NBGRADER = str(Path(sys.executable).parent / "nbgrader")


def _nbgrader(*args, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [NBGRADER, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (
        f"nbgrader {' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    root = tmp_path_factory.mktemp("flow")
    work, release = root / "work", root / "release"
    env = {
        **os.environ,
        "JUPYTER_CONFIG_PATH": str(course.REPO / "grader"),
        "GPU_COURSE_WORK": str(work),
    }
    release_dir = f"--CourseDirectory.release_directory={release}"
    teacher = course.REPO
    _nbgrader("generate_assignment", A, "--force", release_dir, cwd=teacher, env=env)
    _nbgrader("release_assignment", A, "--force", release_dir, cwd=teacher, env=env)
    # nbgrader names a student after the account running the command: this one
    home = root / "student"
    home.mkdir()
    _nbgrader("fetch_assignment", A, f"--course={COURSE_ID}", cwd=home, env=env)
    fetched = home / COURSE_ID / A / f"{A}.ipynb"  # the exchange puts the course id in paths
    assert fetched.is_file()
    nbformat.write(samples.build_submission(A, None), str(fetched))
    _nbgrader("submit", A, f"--course={COURSE_ID}", cwd=home, env=env)
    collect = _nbgrader("collect", A, release_dir, cwd=teacher, env=env)
    # a second student, whose blank copy was collected by hand
    blank = work / "submitted" / "blank" / A
    blank.mkdir(parents=True)
    nbformat.write(samples.build_submission(A, None, blank=True), str(blank / f"{A}.ipynb"))
    grade = _nbgrader("autograde", A, "--force", release_dir, cwd=teacher, env=env)
    _nbgrader("generate_feedback", A, "--force", release_dir, cwd=teacher, env=env)
    # feedback goes back through the exchange to the student who submitted through it
    _nbgrader(
        "release_feedback", A, release_dir, f"--student={get_username()}", cwd=teacher, env=env
    )
    return {
        "root": root, "work": work, "env": env, "collect": collect, "grade": grade,
        "solved": get_username(), "home": home,
    }  # fmt: skip


def _scores(work: Path) -> dict[str, float]:
    with Gradebook(f"sqlite:///{work / 'gradebook.db'}", COURSE_ID) as gb:
        return {s.student.id: s.score for s in gb.assignment_submissions(A)}


def test_collect_finds_the_submission(flow):
    assert (flow["work"] / "submitted" / flow["solved"] / A / f"{A}.ipynb").is_file()


def test_plain_nbgrader_autograde_scores_the_blank_notebook_zero(flow):
    assert _scores(flow["work"])["blank"] == 0


def test_plain_nbgrader_gives_the_solution_every_point_this_machine_can_check(flow):
    nb = course.read(course.source_path(A))
    cells = course.test_cells(nb)
    checkable = sum(t.points for t in cells if torch.cuda.is_available() or not t.needs_cuda)
    assert _scores(flow["work"])[flow["solved"]] == checkable


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_cuda_cells_say_they_were_not_checked(flow):
    graded = flow["work"] / "autograded" / flow["solved"] / A / f"{A}.ipynb"
    text = graded.read_text()
    assert "NotCheckedWithoutCuda" in text and "scores 0" in text


def test_the_student_fetches_feedback(flow):
    home = flow["home"]
    _nbgrader("fetch_feedback", A, f"--course={COURSE_ID}", cwd=home, env=flow["env"])
    assert list((home / COURSE_ID / A / "feedback").rglob("*.html"))


# ------------------------------------------------------- an nbgrader course that is not ours
FOREIGN_COURSE = "an-existing-course"


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    """Every notebook added to an nbgrader course of the instructor's own, with a minimal
    configuration (none of the course's preprocessors: test cells run in the student's kernel,
    as plain nbgrader does), then a blank student copy of each autograded by plain ``nbgrader
    autograde``. The blank copies' teaching demos (cells tagged ``demo``, which define nothing a
    later cell reads: tests/test_release.py) are emptied, to keep the run short."""
    root = tmp_path_factory.mktemp("foreign")
    (root / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.course_id = {FOREIGN_COURSE!r}\n"
        f"c.CourseDirectory.root = {str(root)!r}\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_CONFIG_PATH", GRADING_ENV)}
    env["JUPYTER_CONFIG_DIR"] = str(root / "jupyter-config")  # no user-wide nbgrader settings
    # as in an activated environment: nbgrader runs `alembic` for its gradebook
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for aid in course.assignments():
        shutil.copytree(course.source_path(aid).parent, root / "source" / aid)
        _nbgrader("generate_assignment", aid, "--force", cwd=root, env=env)
        blank = samples.build_submission(aid, None, blank=True)
        for cell in blank.cells:
            if course.DEMO_TAG in cell.metadata.get("tags", []):
                cell.source = "# a teaching demo, emptied for this test"
        folder = root / "submitted" / "blank" / aid
        folder.mkdir(parents=True)
        nbformat.write(blank, str(folder / f"{aid}.ipynb"))
        _nbgrader("autograde", aid, "--force", cwd=root, env=env)
    return root


@pytest.mark.timeout(2400)
@pytest.mark.parametrize("aid", course.assignments())
def test_a_blank_notebook_scores_zero_under_any_nbgrader_configuration(foreign, aid):
    """nbgrader sets NBGRADER_EXECUTION=autograde for every autograde: a CUDA check that could
    not run scores 0 there too, whatever the configuration, and so does every other check of a
    blank notebook."""
    with Gradebook(f"sqlite:///{foreign / 'gradebook.db'}", FOREIGN_COURSE) as gb:
        scores = {s.student.id: (s.score, s.max_score) for s in gb.assignment_submissions(aid)}
    score, max_score = scores["blank"]
    assert max_score > 0 and score == 0, f"{aid}: a blank notebook scored {score}/{max_score}"
    if not torch.cuda.is_available():
        graded = (foreign / "autograded" / "blank" / aid / f"{aid}.ipynb").read_text()
        if any(t.needs_cuda for t in course.test_cells(course.read(course.source_path(aid)))):
            assert "NotCheckedWithoutCuda" in graded and "scores 0" in graded
