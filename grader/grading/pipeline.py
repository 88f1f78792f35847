"""The instructor pipeline on top of nbgrader's API: release, autograde, feedback, export.

Everything goes through :class:`nbgrader.apps.NbGraderAPI` (or nbgrader's own export
plugin and gradebook); this module only chooses folders, adds a progress bar and turns
nbgrader's results into a report an instructor can read.

Folders (see :func:`course_config`): sources in ``solutions/``, the committed student
release in ``notebooks/``, and the instructor's working folders under ``grader/work/``
(git-ignored): ``submitted/<student>/<assignment>/``, ``autograded/``, ``feedback/``
and ``gradebook.db``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from nbgrader.api import Gradebook
from nbgrader.plugins.export import CsvExportPlugin
from tqdm.auto import tqdm

from grader.checks.common import GRADING_ENV
from grader.grading import sandbox
from grader.grading.config import (  # noqa: F401 - re-exported: the course's nbgrader configuration
    CELL_TIMEOUT_S,
    COURSE_ID,
    api_for,
    course_config,
    prepare_work_folders,
)
from grader.grading.grading import GradingOptions, Result, grade_class, shard_of
from grader.grading.release import (  # noqa: F401 - re-exported: the release step (`python -m grader release`)
    PipelineError,
    _require_success,
    clean_sources,
    generate,
    release,
    source_problems,
)
from grader.grading.report import not_checked_cells  # noqa: F401 - re-exported
from grader.runtime import course


# --------------------------------------------------------------------------- autograde
def cuda_cells() -> dict[str, list[str]]:
    """Grade ids of the test cells that need a CUDA GPU, per assignment."""
    out = {}
    for aid in course.assignments():
        cells = [
            t.grade_id
            for t in course.test_cells(course.read(course.source_path(aid)))
            if t.needs_cuda
        ]
        if cells:
            out[aid] = cells
    return out


def refuse_without_gpu(
    assignment_ids: Iterable[str], cpu_ok: bool, *, gpu: bool | None = None
) -> None:
    """Refuse to grade CUDA checks without a GPU unless told to accept zeros.

    Args:
        assignment_ids: What is graded.
        cpu_ok: Accept that CUDA cells score 0.
        gpu: Whether the machines that grade have a GPU (None: this machine, asked of torch).

    Raises:
        PipelineError: no CUDA GPU, CUDA-only cells exist and ``cpu_ok`` is False.
    """
    import torch

    if gpu is None:
        gpu = torch.cuda.is_available()
    if cpu_ok or gpu:
        return
    cells = {aid: ids for aid, ids in cuda_cells().items() if aid in set(assignment_ids)}
    if cells:
        listing = "; ".join(f"{aid}: {', '.join(ids)}" for aid, ids in cells.items())
        points = sum(
            t.points
            for aid in cells
            for t in course.test_cells(course.read(course.source_path(aid)))
            if t.needs_cuda
        )
        raise PipelineError(
            "This machine has no CUDA GPU, so these test cells cannot be checked and would score 0 "
            f"({points:g} points per student): {listing}.\n"
            "Grade on a GPU machine, or pass --cpu-ok to accept that those cells score 0 "
            "(the report lists them as not checked)."
        )


def root_unsandboxed(options: GradingOptions) -> str:
    """Why kernels would run as root with nothing between them and the machine (this process
    is root and the sandbox is off or unavailable), or "" when they would not."""
    if os.geteuid() != 0:
        return ""
    if not options.isolate:
        return "the sandbox is turned off (--no-sandbox)"
    if not sandbox.bwrap_available():
        return (
            "bubblewrap (bwrap) is not installed or cannot create its namespaces here"
            if shutil.which("bwrap")
            else "bubblewrap (bwrap) is not installed"
        )
    return ""


def refuse_root_unsandboxed(options: GradingOptions) -> None:
    """Refuse to run students' code as root without the sandbox unless told to.

    Raises:
        PipelineError: this process is root, kernels would not be sandboxed, and
            ``options.allow_root_unsandboxed`` is False.
    """
    why = root_unsandboxed(options)
    if why and not options.allow_root_unsandboxed:
        raise PipelineError(
            f"REFUSED: this command runs as root and {why}, so every student's code would run "
            "as root on this machine: it could read and change anything here (other students' "
            "submissions, the gradebook, the course's answers, /etc/shadow, your home folder).\n"
            "Install bubblewrap (apt-get install bubblewrap) so kernels run sandboxed as an "
            "unprivileged user, or grade as an unprivileged user, or pass "
            "--allow-root-unsandboxed to accept the risk (trusted notebooks only)."
        )


@contextlib.contextmanager
def grading_environment() -> Iterator[None]:
    """Set the grading-mode variable that the notebook kernels inherit."""
    saved = os.environ.get(GRADING_ENV)
    os.environ[GRADING_ENV] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(GRADING_ENV, None)
        else:
            os.environ[GRADING_ENV] = saved


def submissions_in(submitted: Path) -> list[tuple[str, str]]:
    """(student, assignment) pairs found under a submissions folder, sorted.

    Raises:
        PipelineError: the folder does not exist.
    """
    submitted = Path(submitted)
    if not submitted.is_dir():
        raise PipelineError(
            f"no submissions folder at {submitted}: expected <student>/<assignment>/<assignment>.ipynb inside"
        )
    known = set(course.assignments())
    pairs = []
    for student_dir in sorted(submitted.iterdir()):
        if student_dir.name in _NOT_STUDENTS or not _real_dir(student_dir):
            continue
        for assignment_dir in sorted(student_dir.iterdir()):
            if assignment_dir.name in known and _real_dir(assignment_dir):
                pairs.append((student_dir.name, assignment_dir.name))
    return pairs


#: Folders of a submissions folder that are not students.
_NOT_STUDENTS = {".ipynb_checkpoints", "__pycache__", ".git"}


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def skipped_submissions(submitted: Path) -> list[str]:
    """What :func:`submissions_in` leaves out of a submissions folder, and why (for the report):
    links and files where student or assignment folders are expected, and assignment folders
    the course does not have."""
    submitted = Path(submitted)
    if not submitted.is_dir():
        return []
    known = set(course.assignments())
    out = []
    for student_dir in sorted(submitted.iterdir()):
        if student_dir.name in _NOT_STUDENTS:
            continue
        if not _real_dir(student_dir):
            kind = "a link" if student_dir.is_symlink() else "not a folder"
            out.append(f"{student_dir.name!r}: {kind}, not graded")
            continue
        for assignment_dir in sorted(student_dir.iterdir()):
            if assignment_dir.name in known and not _real_dir(assignment_dir):
                out.append(f"{student_dir.name!r}/{assignment_dir.name}: a link, not graded")
            elif assignment_dir.name not in known and _real_dir(assignment_dir):
                out.append(
                    f"{student_dir.name!r}/{assignment_dir.name!r}: not an assignment of the course"
                )
    return out


def autograde(
    submitted: Path | None = None,
    *,
    work: Path | None = None,
    assignment_ids: Iterable[str] | None = None,
    options: GradingOptions | None = None,
    cpu_ok: bool = False,
    progress: bool = True,
    shard: tuple[int, int] | None = None,
    engine=None,
    allow_root_unsandboxed: bool = False,
) -> list[Result]:
    """Autograde every submission in a folder with nbgrader, several at a time, each isolated
    (see :mod:`grader.grading.grading`), into the gradebook of ``work``.

    The grading processes are started by :mod:`multiprocessing`'s fork server, which imports a
    script's main module again: a script calling this keeps its top-level work under
    ``if __name__ == "__main__":`` (without it, Python's own error says so and every job fails).

    Args:
        submitted: ``<student>/<assignment>/<assignment>.ipynb`` folder (default
            ``<work>/submitted``).
        work: Instructor working folder (default ``grader/work``).
        assignment_ids: Only these assignments (default: all found).
        options: Parallelism, limits, sandbox, regrading (default: this machine's defaults).
        cpu_ok: Accept that CUDA-only cells score 0 on a machine without a GPU (also
            ``options.cpu_ok``).
        progress: Show a tqdm progress bar.
        shard: ``(k, n)``: grade only the students of shard ``k`` of ``n`` (1-based; see
            :func:`grader.grading.grading.shard_of`), for ``python -m grader merge`` to combine.
        engine: What runs the jobs (default: processes on this machine; see
            :func:`grader.grading.grading.grade_class`).
        allow_root_unsandboxed: Grade as root without the sandbox (also
            ``options.allow_root_unsandboxed``): for trusted notebooks only, such as the
            course's own samples.

    Returns:
        One :class:`grader.grading.grading.Result` per (student, assignment), in order.

    Raises:
        PipelineError: no GPU and not ``cpu_ok``, grading as root without the sandbox and not
            ``allow_root_unsandboxed``, a bad shard, or the gradebook could not be prepared.
    """
    options = options or GradingOptions.for_machine()
    options.cpu_ok = options.cpu_ok or cpu_ok
    options.allow_root_unsandboxed = options.allow_root_unsandboxed or allow_root_unsandboxed
    refuse_root_unsandboxed(options)
    config = course_config(work, submitted)
    submitted_dir = Path(config.CourseDirectory.submitted_directory)
    pairs = submissions_in(submitted_dir)
    wanted = set(assignment_ids) if assignment_ids else {a for _, a in pairs}
    for aid in wanted:
        course.check_assignment(aid)
    pairs = [(s, a) for s, a in pairs if a in wanted]
    if shard is not None:
        k, n = shard
        if not (n >= 1 and 1 <= k <= n):
            raise PipelineError(f"--shard {k}/{n}: K must be between 1 and N")
        pairs = [(s, a) for s, a in pairs if shard_of(s, n) == k - 1]
    cluster_gpu = getattr(engine, "has_gpu", None)
    refuse_without_gpu(wanted, options.cpu_ok or options.cells == "no-cuda", gpu=cluster_gpu)
    api_for(config)  # creates the working folders
    with tempfile.TemporaryDirectory(prefix="gradebook-release-") as tmp:
        for aid in sorted(wanted):  # records test cells (hidden ones too) in the gradebook
            generate(aid, Path(tmp), config=config, use_db=True)
    work_dir = Path(config.CourseDirectory.autograded_directory).parent
    with grading_environment():
        return grade_class(
            submitted_dir, work_dir, pairs, options, progress=progress, engine=engine
        )


# --------------------------------------------------------------------------- feedback, export
def feedback(work: Path | None = None, *, progress: bool = True) -> list[Path]:
    """Generate HTML feedback for every autograded submission.

    Returns:
        Paths of the feedback files written.

    Raises:
        PipelineError: nothing has been autograded yet, or nbgrader failed.
    """
    config = course_config(work)
    autograded = Path(config.CourseDirectory.autograded_directory)
    pairs = submissions_in(autograded) if autograded.is_dir() else []
    if not pairs:
        raise PipelineError(
            f"nothing autograded under {autograded}: run `python -m grader autograde` first"
        )
    api = api_for(config)
    written = []
    for student, aid in tqdm(pairs, desc="feedback", unit="notebook", disable=not progress):
        _require_success(
            api.generate_feedback(aid, student, force=True), f"feedback for {student}/{aid}"
        )
        written.extend(
            sorted((Path(config.CourseDirectory.feedback_directory) / student / aid).glob("*.html"))
        )
    return written


def export_csv(to: Path, work: Path | None = None) -> Path:
    """Export all grades to CSV with nbgrader's own CSV exporter.

    Returns:
        The CSV path.

    Raises:
        PipelineError: there is no gradebook yet.
    """
    config = course_config(work)
    db = Path(config.CourseDirectory.db_url.removeprefix("sqlite:///"))
    if not db.is_file():
        raise PipelineError(f"no gradebook at {db}: run `python -m grader autograde` first")
    to = Path(to).resolve()
    to.parent.mkdir(parents=True, exist_ok=True)
    with Gradebook(config.CourseDirectory.db_url) as gb:
        CsvExportPlugin(to=str(to)).export(gb)
    return to
