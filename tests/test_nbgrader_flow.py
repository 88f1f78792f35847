"""The whole nbgrader flow with nbgrader's own command line, from a fresh working folder: the
instructor generates and releases an assignment into the course-local exchange, a student fetches
it, answers and submits, the instructor collects, autogrades (plain ``nbgrader autograde``, no
course command), generates and releases feedback, and the student fetches it. The course's
configuration (grader/nbgrader_config.py) makes plain nbgrader judge test cells in the grading
process: the blank notebook scores 0, CUDA cells without a GPU score 0 and say so (about two
minutes).

Then every notebook added to an nbgrader course of an instructor's own, with a minimal
configuration: plain nbgrader runs the test cells in the student's kernel and scores them from
their outputs, so a blank copy must score 0, and the reference and a correct alternative every
point but the CUDA cells' without a GPU, which they lose if a check lets anything reach the
cell's stderr (a synthetic assignment shows that they would). One autograde of all of it."""

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

from grader.checks.common import CUDA_SUFFIX, GRADING_ENV
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
#: The students of that course in the full command, each with a submission of every
#: assignment: the blank copy and the reference solution. A third, ``alternative_1`` of the
#: sample class (``samples.demo_class``: one correct sample of each exercise that has one,
#: written differently from the reference), is graded in a course of its own under the
#: ``whole_class`` marker (:func:`foreign_alternatives`).
FOREIGN_STUDENTS = ("blank", "reference")


def foreign_course(
    root: Path,
    assignments: list[str],
    sources: dict[str, Path] | None = None,
    students: tuple[str, ...] = FOREIGN_STUDENTS,
):
    """Grade ``students``' submissions of ``assignments`` in an nbgrader course of an
    instructor's own at ``root``, with a minimal configuration: none of the course's
    preprocessors, so test cells run in the student's kernel and nbgrader scores them from their
    outputs, as plain nbgrader does. The only setting beside the course's id and root is the cell
    timeout the README tells such an instructor to set (nbgrader's default of 30 s would cut the
    checks that start ranks or compile). Each submission's teaching demos (cells tagged ``demo``,
    which define nothing a later cell reads: tests/test_release.py) are emptied, to keep the run
    short. One ``nbgrader autograde`` grades every assignment (its id is a glob).

    Args:
        root: An empty folder: the course's root.
        assignments: Assignment ids of this course.
        sources: More assignments, id -> source folder, graded the same way but for the
            ``reference`` student only, who submits the source as it is (a self-test's).

    Returns:
        The autograde's completed process (not checked: a notebook whose kernel died leaves
        its grades empty and the command exits 1 after grading the others).
    """
    from grader.grading.config import CELL_TIMEOUT_S

    (root / "nbgrader_config.py").write_text(
        "c = get_config()\n"
        f"c.CourseDirectory.course_id = {FOREIGN_COURSE!r}\n"
        f"c.CourseDirectory.root = {str(root)!r}\n"
        f"c.Execute.timeout = {CELL_TIMEOUT_S}\n"
    )
    # as an instructor's shell: no PYTEST_* variables (ipykernel does not forward what is written
    # to file descriptor 2 into the notebook while PYTEST_CURRENT_TEST is set, so Kineto's lines
    # would never reach a cell here although they do in a real course)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JUPYTER_CONFIG_PATH", GRADING_ENV) and not k.startswith("PYTEST_")
    }
    env["JUPYTER_CONFIG_DIR"] = str(root / "jupyter-config")  # no user-wide nbgrader settings
    # as in an activated environment: nbgrader runs `alembic` for its gradebook
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    # the checks import the course (step 1 of the README's recipe: pip install -e)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(course.REPO), env.get("PYTHONPATH")]))
    submissions: dict[tuple[str, str], nbformat.NotebookNode] = {}
    for aid in assignments:
        shutil.copytree(course.source_path(aid).parent, root / "source" / aid)
        for st in samples.demo_class([aid]):
            if st.name in students:
                submissions[st.name, aid] = st.notebooks[aid]
    for aid, folder in (sources or {}).items():
        shutil.copytree(folder, root / "source" / aid)
        submissions["reference", aid] = nbformat.read(str(folder / f"{aid}.ipynb"), as_version=4)
    for aid in [*assignments, *(sources or {})]:
        _nbgrader("generate_assignment", aid, "--force", cwd=root, env=env)
    for (student, aid), nb in submissions.items():
        for cell in nb.cells:
            if course.DEMO_TAG in cell.metadata.get("tags", []):
                cell.source = "# a teaching demo, emptied for this test"
        folder = root / "submitted" / student / aid
        folder.mkdir(parents=True)
        nbformat.write(nb, str(folder / f"{aid}.ipynb"))
    return subprocess.run(
        [NBGRADER, "autograde", "*", "--force"],
        cwd=root, env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip


#: A synthetic assignment graded with the others (``foreign_course``'s ``sources``): its test
#: cells pass their assertions, then write to stderr, as a check that lets torch, Kineto or a
#: launcher write there would (``_stderr_selftest``).
SELFTEST = "00_stderr_selftest"
_SELFTEST_CELLS = {
    "test_writes_to_fd_2": (
        "import os\nimport time\n\nfrom grader.checks.common import passed\n\n"
        "assert answer() == 42\n"
        # as C++ does; bound, as a check's writes are: a cell's last value is partial credit
        '_ = os.write(2, b"USDT: SyncActivityProfilerHandler.cpp:39] profiler_start\\n")\n'
        'passed("answer() is 42")\n'
        # ipykernel forwards file descriptor 2 from a thread: a line written as the cell ends
        # may land in the next cell (seen under load); a check goes on after Kineto writes
        "time.sleep(3)\n"
    ),
    "test_torch_logs_a_warning": (
        "import logging\n\nimport torch\n\nfrom grader.checks.common import passed\n\n"
        "assert answer() == 42\n"
        'passed("answer() is 42")\n'
        # torch.distributed.elastic's line when it stops a worker ("Terminating process ..." of
        # torch.multiprocessing.spawn is dropped by grader.runtime.quiet.drop_torch_notices)
        'logging.getLogger("torch.distributed.elastic.multiprocessing.api").warning('
        '"Closing process 1 via signal SIGTERM")\n'
    ),
    "test_stderr_captured": (
        "import logging\nimport os\nimport subprocess\nimport sys\nimport warnings\n\n"
        "import torch\n\n"
        "from grader.checks.common import passed\n"
        "from grader.runtime.quiet import captured_stderr\n\n"
        "with captured_stderr():\n"
        "    assert answer() == 42\n"
        '    os.write(2, b"USDT: SyncActivityProfilerHandler.cpp:39] profiler_start\\n")\n'
        '    logging.getLogger("torch.multiprocessing.spawn").warning("Terminating process 1")\n'
        '    warnings.warn("a RuntimeWarning", RuntimeWarning, stacklevel=1)\n'
        '    print("from Python", file=sys.stderr)\n'
        "    subprocess.run([sys.executable, '-c', 'import sys; sys.stderr.write(\"a rank\\\\n\")'])\n"
        'passed("answer() is 42")\n'
    ),
}


def _stderr_selftest(folder: Path) -> Path:
    """Write the source of :data:`SELFTEST` into ``folder``; return ``folder``. One exercise
    (``answer`` returns 42) and three test cells of a point each, all of which pass their
    assertions: the first writes one line to file descriptor 2, the second logs a warning
    through torch's logging handler, the third does both and more inside
    :func:`grader.runtime.quiet.captured_stderr`."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3",
        "language": "python",
        "name": "python3",
    }
    meta = {"locked": False, "schema_version": 3, "task": False}
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "def answer():\n    ### BEGIN SOLUTION\n    return 42\n    ### END SOLUTION\n",
            id="answer",
            metadata={"nbgrader": {**meta, "grade": False, "grade_id": "answer", "solution": True}},
        )
    )
    for grade_id, code in _SELFTEST_CELLS.items():
        test = {**meta, "grade": True, "grade_id": grade_id, "points": 1, "solution": False}
        nb.cells.append(
            nbformat.v4.new_code_cell(
                code, id=grade_id, metadata={"nbgrader": {**test, "locked": True}}
            )
        )
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(folder / f"{SELFTEST}.ipynb"))
    return folder


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    """Every notebook added to an nbgrader course of the instructor's own (``foreign_course``):
    a blank copy and the reference of each, and the stderr self-test (:data:`SELFTEST`),
    autograded by one plain ``nbgrader autograde``."""
    root = tmp_path_factory.mktemp("foreign")
    selftest = _stderr_selftest(tmp_path_factory.mktemp("selftest") / SELFTEST)
    proc = foreign_course(root, course.assignments(), {SELFTEST: selftest})
    (root / "autograde.log").write_text(proc.stdout + proc.stderr)  # to read after a failure
    return {"root": root, "proc": proc}


@pytest.fixture(scope="module")
def foreign_alternatives(tmp_path_factory):
    """A correct alternative of every notebook in a foreign course of its own (the
    ``whole_class`` tier: about 4 minutes on 2 cores)."""
    root = tmp_path_factory.mktemp("foreign-alternatives")
    proc = foreign_course(root, course.assignments(), students=("alternative_1",))
    (root / "autograde.log").write_text(proc.stdout + proc.stderr)
    return {"root": root, "proc": proc}


def _autograde_log(foreign, aid: str, student: str) -> str:
    """What nbgrader's autograde logged about one submission (its lines, to the next one's)."""
    lines = (foreign["proc"].stdout + foreign["proc"].stderr).splitlines()
    mine = [i for i, line in enumerate(lines) if f"/{student}/{aid}/" in line]
    if not mine:
        return "\n".join(lines[-40:])
    end = next(
        (i for i in range(mine[-1] + 1, len(lines)) if "Autograding" in lines[i]), len(lines)
    )
    return "\n".join(lines[mine[0] : end])[-4000:]


def _foreign_grades(foreign, aid: str, student: str) -> dict[str, tuple[float, float]]:
    """Grade id -> (score, max score) of one graded submission of the foreign course.

    Raises:
        AssertionError: nbgrader did not grade it, or its execution failed (nbgrader then
            removes the autograded notebook), with what nbgrader logged about it.
    """
    root = foreign["root"]
    graded = root / "autograded" / student / aid / f"{aid}.ipynb"
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}", FOREIGN_COURSE) as gb:
        try:
            sub = gb.find_submission_notebook(aid, aid, student)
        except Exception as exc:  # noqa: BLE001 - MissingEntry: say why there is none
            log = _autograde_log(foreign, aid, student)
            raise AssertionError(f"{student}/{aid} was not graded ({exc}):\n{log}") from None
        grades = {g.name: (g.score, g.max_score) for g in sub.grades if g.cell_type == "code"}
    if not graded.is_file():
        log = _autograde_log(foreign, aid, student)
        raise AssertionError(f"nbgrader failed to grade {student}/{aid}:\n{log}")
    return grades


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("aid", course.assignments())
def test_a_blank_notebook_scores_zero_under_any_nbgrader_configuration(foreign, aid):
    """nbgrader sets NBGRADER_EXECUTION=autograde for every autograde: a CUDA check that could
    not run scores 0 there too, whatever the configuration, and so does every other check of a
    blank notebook."""
    grades = _foreign_grades(foreign, aid, "blank")
    score, max_score = sum(s for s, _ in grades.values()), sum(m for _, m in grades.values())
    assert max_score > 0 and score == 0, f"{aid}: a blank notebook scored {score}/{max_score}"
    if not torch.cuda.is_available():
        graded = (foreign["root"] / "autograded" / "blank" / aid / f"{aid}.ipynb").read_text()
        if any(t.needs_cuda for t in course.test_cells(course.read(course.source_path(aid)))):
            assert "NotCheckedWithoutCuda" in graded and "scores 0" in graded


def assert_every_point(root: Path, aid: str, student: str, grades: dict) -> None:
    """Require every graded cell of ``student``'s ``aid`` in the foreign course at ``root`` to
    score its points, but a CUDA cell on a machine without a GPU, which scores 0 (its check raises
    NotCheckedWithoutCuda under any autograde). A cell that lost points is named with what it
    wrote to stderr or raised: under plain nbgrader one line on stderr costs a cell its points
    (``nbgrader.utils.determine_grade``)."""
    nb = nbformat.read(str(root / "autograded" / student / aid / f"{aid}.ipynb"), as_version=4)
    gpu = torch.cuda.is_available()
    wrong = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        grade_id = meta["grade_id"]
        score, max_score = grades[grade_id]
        expected = 0 if grade_id.endswith(CUDA_SUFFIX) and not gpu else max_score
        if score != expected:
            said = [
                f"stderr: {o.text.strip()[-800:]}"
                for o in cell.outputs
                if o.output_type == "stream" and o.name == "stderr"
            ] + [
                f"{o.ename}: {o.evalue[-800:]}" for o in cell.outputs if o.output_type == "error"
            ]  # fmt: skip
            wrong.append(
                f"{grade_id}: {score}/{max_score}, expected {expected}\n  " + "\n  ".join(said)
            )
    if wrong:  # raised, not asserted: pytest would re-indent the message's lines
        raise AssertionError(f"{student}/{aid} under plain nbgrader:\n" + "\n".join(wrong))


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("aid", course.assignments())
def test_a_correct_answer_gets_every_point_under_any_nbgrader_configuration(foreign, aid):
    """The reference of each assignment, graded by plain nbgrader, which scores a cell 0 when
    it writes anything to stderr: no check, demo helper or rank launcher a test cell calls
    writes there for a correct answer (grader.runtime.quiet)."""
    grades = _foreign_grades(foreign, aid, "reference")
    assert_every_point(foreign["root"], aid, "reference", grades)


@pytest.mark.whole_class
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("aid", course.assignments())
def test_a_correct_alternative_gets_every_point_under_any_nbgrader_configuration(
    foreign_alternatives, aid
):
    """The same for a correct alternative of each assignment (answers written differently)."""
    grades = _foreign_grades(foreign_alternatives, aid, "alternative_1")
    assert_every_point(foreign_alternatives["root"], aid, "alternative_1", grades)


def test_a_check_that_writes_one_line_to_stderr_fails_the_correct_answer_test(foreign):
    """The self-test of the test above: under plain nbgrader, a test cell whose assertions pass
    but which writes one line to file descriptor 2 (as Kineto does), or whose torch logs one
    warning (as ``torch.distributed.elastic`` does when it stops a worker), scores 0, and
    ``assert_every_point`` names it with that line; the same writes inside
    ``captured_stderr`` cost nothing."""
    grades = _foreign_grades(foreign, SELFTEST, "reference")
    assert grades == {
        "test_writes_to_fd_2": (0, 1),
        "test_torch_logs_a_warning": (0, 1),
        "test_stderr_captured": (1, 1),
    }
    with pytest.raises(AssertionError) as failed:
        assert_every_point(foreign["root"], SELFTEST, "reference", grades)
    message = str(failed.value)
    assert "test_writes_to_fd_2: 0.0/1.0, expected 1.0\n  stderr: USDT: " in message
    assert "test_torch_logs_a_warning: 0.0/1.0" in message and "via signal SIGTERM" in message
    assert "test_stderr_captured" not in message
