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
import filecmp
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook
from nbgrader.plugins.export import CsvExportPlugin
from tqdm.auto import tqdm
from traitlets.config import Config

from . import course
from .common import GRADING_ENV
from .config import (  # noqa: F401 - re-exported: the course's nbgrader configuration
    CELL_TIMEOUT_S,
    COURSE_ID,
    api_for,
    course_config,
    prepare_work_folders,
)
from .grading import GradingOptions, Result, grade_class, shard_of
from .report import not_checked_cells  # noqa: F401 - re-exported


class PipelineError(RuntimeError):
    """An instructor command could not do what was asked (the message says what to do)."""


def _require_success(result: dict, what: str) -> None:
    """Raise with nbgrader's own error lines when an API call reports failure."""
    if not result.get("success"):
        log = (result.get("log") or "").strip().splitlines()
        # nbgrader logs the real cause (an exception line) before its generic summary.
        causes = [
            line.strip()
            for line in log
            if "Error" in line or "Exception" in line or line.startswith("[ERROR]")
        ]
        detail = causes[-8:] or (result.get("error") or "no log").strip().splitlines()[-8:]
        raise PipelineError(f"{what} failed:\n  " + "\n  ".join(detail))


# --------------------------------------------------------------------------- release
def generate(
    assignment_id: str, dest: Path, *, config: Config | None = None, use_db: bool = False
) -> Path:
    """Generate the student version of one assignment into ``dest/<assignment_id>/``.

    Args:
        assignment_id: e.g. ``"01_devices"``.
        dest: Folder that receives the assignment folder.
        config: Course config (default :func:`course_config`).
        use_db: Also record the assignment and its (hidden) test cells in the
            gradebook, which autograding needs.

    Returns:
        The generated notebook's path.

    Raises:
        PipelineError: nbgrader reported a failure.
    """
    course.check_assignment(assignment_id)
    c = Config(config or course_config())
    c.CourseDirectory.release_directory = str(Path(dest).resolve())
    # The same two settings as nbgrader's own `generate_assignment --no-db` flag.
    c.GenerateAssignment.no_database = not use_db
    c.SaveCells.enabled = use_db
    result = api_for(c).generate_assignment(assignment_id, force=True, create=True)
    _require_success(result, f"nbgrader generate_assignment {assignment_id}")
    out = Path(dest) / assignment_id / f"{assignment_id}.ipynb"
    if not out.is_file():
        raise PipelineError(f"nbgrader reported success but wrote no {out}")
    return out


def release(assignment_ids: Iterable[str] | None = None, *, check: bool = False) -> list[str]:
    """Regenerate ``notebooks/`` from ``solutions/`` (or, with ``check``, compare only).

    Generation goes to a temporary folder first, so a failure leaves the committed
    release untouched.

    Args:
        assignment_ids: Assignments to process (default: all).
        check: Do not write; report which assignments differ from a fresh generation.

    Returns:
        The assignments whose committed release differed (and, without ``check``,
        was rewritten), and ``"README.md"`` when the course index ``notebooks/README.md``
        differed from :func:`grader.course.index_markdown` (all assignments only).

    Raises:
        PipelineError: a source notebook has outputs, or generation failed.
    """
    ids = [course.check_assignment(a) for a in (assignment_ids or course.assignments())]
    for aid in ids:
        problems = source_problems(aid)
        if problems:
            raise PipelineError(
                f"solutions/{aid} is not clean ({'; '.join(problems)}). "
                "Run `python -m grader clean` to strip outputs and execution metadata."
            )
    changed = []
    with tempfile.TemporaryDirectory(prefix="release-") as tmp:
        for aid in tqdm(ids, desc="generate release", unit="notebook", disable=None):
            generate(aid, Path(tmp))
            fresh, committed = Path(tmp) / aid, course.NOTEBOOKS / aid
            if not committed.is_dir() or _dirs_differ(fresh, committed):
                changed.append(aid)
                if not check:
                    if committed.exists():
                        shutil.rmtree(committed)
                    shutil.copytree(fresh, committed)
    index = course.NOTEBOOKS / "README.md"
    if assignment_ids is None and (
        not index.is_file() or index.read_text() != course.index_markdown()
    ):
        changed.append("README.md")
        if not check:
            index.write_text(course.index_markdown())
    return changed


def _dirs_differ(a: Path, b: Path) -> bool:
    # Files a notebook writes when run (course.WRITTEN_FILES) are not part of a release.
    cmp = filecmp.dircmp(a, b, ignore=[*filecmp.DEFAULT_IGNORES, *course.WRITTEN_FILES])
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return True
    _, mismatch, errors = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)
    return bool(mismatch or errors) or any(_dirs_differ(a / d, b / d) for d in cmp.common_dirs)


def source_problems(assignment_id: str) -> list[str]:
    """Why a source notebook is not clean: outputs, execution counts or timing metadata.

    Returns:
        One string per problem; empty when clean.
    """
    nb = course.read(course.source_path(assignment_id))
    problems = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if cell.get("outputs"):
            problems.append(f"cell {cell.get('id')} has outputs")
        if cell.get("execution_count") is not None:
            problems.append(f"cell {cell.get('id')} has an execution count")
        if "execution" in cell.get("metadata", {}):
            problems.append(f"cell {cell.get('id')} has execution timing metadata")
    if not all(cell.get("id") for cell in nb.cells):
        problems.append("a cell has no pinned id")
    return problems


def clean_sources(assignment_ids: Iterable[str] | None = None) -> list[str]:
    """Strip outputs, execution counts and execution metadata from source notebooks,
    keeping nbgrader metadata and cell ids.

    Returns:
        The assignments whose source changed.
    """
    changed = []
    for aid in assignment_ids or course.assignments():
        path = course.source_path(aid)
        nb = course.read(path)
        before = nbformat.writes(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = []
                cell.execution_count = None
            cell.metadata.pop("execution", None)
            cell.metadata.pop("collapsed", None)
            cell.metadata.pop("scrolled", None)
        nb.metadata.pop("widgets", None)
        nb.metadata["language_info"] = {"name": "python"}
        if nbformat.writes(nb) != before:
            nbformat.write(nb, str(path))
            changed.append(aid)
    return changed


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
) -> list[Result]:
    """Autograde every submission in a folder with nbgrader, several at a time, each isolated
    (see :mod:`grader.grading`), into the gradebook of ``work``.

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
            :func:`grader.grading.shard_of`), for ``python -m grader merge`` to combine.
        engine: What runs the jobs (default: processes on this machine; see
            :func:`grader.grading.grade_class`).

    Returns:
        One :class:`grader.grading.Result` per (student, assignment), in order.

    Raises:
        PipelineError: no GPU and not ``cpu_ok``, a bad shard, or the gradebook could not be
            prepared.
    """
    options = options or GradingOptions.for_machine()
    options.cpu_ok = options.cpu_ok or cpu_ok
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
