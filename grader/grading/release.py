"""The release step on top of nbgrader's API: generate the student copies from ``solutions/``.

:func:`release` regenerates (or, with ``check``, compares) the committed student copies in
``notebooks/``; :func:`generate` is nbgrader's ``generate_assignment`` for one assignment, also
used by the grading engine to build each assignment's gradebook. Sources must be clean
(:func:`source_problems`, :func:`clean_sources`). What Jupyter or a student's run writes beside a
notebook (checkpoints, caches, files a notebook writes) is not part of a release
(:func:`release_ignores`).

May import: :mod:`grader.runtime`, :mod:`grader.grading.config` (and nbgrader).
"""

from __future__ import annotations

import atexit
import fnmatch
import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

import nbformat
from nbgrader.coursedir import CourseDirectory
from tqdm.auto import tqdm
from traitlets.config import Config

from grader.grading.config import api_for, course_config
from grader.runtime import course


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
    _move_banner(out, assignment_id)
    return out


#: (assignment, hash of its source) -> the student copy generated from that source.
_STUDENT_COPIES: dict[tuple[str, str], Path] = {}


def student_copy(assignment_id: str) -> Path:
    """The student copy of an assignment as the release step makes it from ``solutions/`` now.

    Generated (:func:`generate`) into a temporary folder of this process, once per version of
    the source, and removed at exit. The instructor's tools (the demo's blank copy and samples,
    the grading engine's intake and scan) read this, never ``notebooks/``: that is where a
    student following the README may be working, and their edits must not change anyone's
    verdict. ``tests/test_release.py`` keeps the committed ``notebooks/`` equal to it.

    Returns:
        The generated notebook's path (``<tmp>/<assignment_id>/<assignment_id>.ipynb``).

    Raises:
        ValueError: an unknown assignment.
        PipelineError: nbgrader could not generate it.
    """
    course.check_assignment(assignment_id)
    digest = hashlib.sha256(course.source_path(assignment_id).read_bytes()).hexdigest()
    key = (assignment_id, digest)
    path = _STUDENT_COPIES.get(key)
    if path is None or not path.is_file():
        folder = Path(tempfile.mkdtemp(prefix=f"student-copy-{assignment_id}-"))
        atexit.register(shutil.rmtree, folder, True)
        path = _STUDENT_COPIES[key] = generate(assignment_id, folder)
    return path


#: How every source notebook begins: a blockquote for instructors ("> **Course file.** The
#: student copy ... is generated from the instructor source ...").
SOURCE_BANNER = "> **Course file.**"


def instructor_note(assignment_id: str) -> str:
    """The one short line that replaces the source's banner at the end of the student copy's
    first cell: a student's first lines are the title and the learning objectives (STYLE.md)."""
    source = course.source_path(assignment_id).relative_to(course.REPO).as_posix()
    return (
        f"*For instructors: this copy is generated from `{source}` by "
        "`python -m grader release`; edit the source, not this copy.*"
    )


def _move_banner(path: Path, assignment_id: str) -> None:
    """Drop the instructors' banner from the top of a generated student copy and put
    :func:`instructor_note` at the end of its first cell (a source without the banner is left
    as nbgrader wrote it)."""
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0] if nb.cells else None
    if first is None or first.cell_type != "markdown":
        return
    lines = first.source.splitlines()
    if not lines or not lines[0].startswith(SOURCE_BANNER):
        return
    end = next((i for i, line in enumerate(lines) if not line.startswith(">")), len(lines))
    body = "\n".join(lines[end:]).strip("\n")
    first.source = f"{body}\n\n{instructor_note(assignment_id)}"
    nbformat.write(nb, path)


def release(assignment_ids: Iterable[str] | None = None, *, check: bool = False) -> list[str]:
    """Regenerate ``notebooks/`` from ``solutions/`` (or, with ``check``, compare only).

    Generation goes to a temporary folder first, so a failure leaves the committed
    release untouched; then only the files that differ (:func:`release_differences`) are
    written or, when a release no longer has them, removed. What taking the course leaves
    beside the notebooks (checkpoints, a student's own files) is neither compared nor touched.

    Args:
        assignment_ids: Assignments to process (default: all).
        check: Do not write; report which assignments differ from a fresh generation.

    Returns:
        The assignments whose committed release differed (and, without ``check``,
        was rewritten), and ``"README.md"`` when the course index ``notebooks/README.md``
        differed from :func:`grader.runtime.course.index_markdown` (all assignments only).

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
            differences = release_differences(fresh, committed)
            if differences:
                changed.append(aid)
                if not check:
                    for rel in differences:
                        if (fresh / rel).is_file():
                            (committed / rel).parent.mkdir(parents=True, exist_ok=True)
                            shutil.copyfile(fresh / rel, committed / rel)
                        else:  # a file of an earlier release that this one no longer has
                            (committed / rel).unlink()
    index = course.NOTEBOOKS / "README.md"
    if assignment_ids is None and (
        not index.is_file() or index.read_text() != course.index_markdown()
    ):
        changed.append("README.md")
        if not check:
            index.write_text(course.index_markdown())
    return changed


def release_ignores() -> list[str]:
    """Name patterns (``fnmatch``) of what is never part of a release, at any depth: nbgrader's own
    ignore list (``CourseDirectory.ignore``: ``.ipynb_checkpoints``, ``__pycache__``, ...), hidden
    files (what Jupyter and its extensions write beside a notebook: checkpoints,
    ``.virtual_documents``, ...; JupyterLab hides them) and the files a notebook writes when run
    (:data:`grader.runtime.course.WRITTEN_FILES`)."""
    return [*CourseDirectory().ignore, ".*", *course.WRITTEN_FILES]


def _ignored(rel: Path, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatch(part, pat) for part in rel.parts for pat in patterns)


def _files(folder: Path, patterns: list[str]) -> set[Path]:
    if not folder.is_dir():
        return set()
    return {
        p.relative_to(folder)
        for p in folder.rglob("*")
        if p.is_file() and not _ignored(p.relative_to(folder), patterns)
    }


def _git(*args: str) -> bytes | None:
    """Output of a git command in the repository, or None where git or the repository is
    missing or the command fails (a copy of the course that is not a git checkout)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(course.REPO), *args], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def release_differences(fresh: Path, committed: Path) -> list[str]:
    """The files in which the committed release ``committed`` differs from a fresh generation
    ``fresh`` (paths relative to both), sorted.

    What taking the course leaves in ``notebooks/`` is not a difference: anything
    :func:`release_ignores` names, a file git does not track (a student's own file), and a release
    file the student changed while the version git has committed is the fresh one (a notebook
    worked in where the README says to). Outside a git checkout every file counts.
    """
    patterns = release_ignores()
    new, old = _files(fresh, patterns), _files(committed, patterns)
    rel_folder = None
    if committed.is_dir() and committed.resolve().is_relative_to(course.REPO):
        rel_folder = committed.resolve().relative_to(course.REPO)
    tracked: set[Path] | None = None
    if rel_folder is not None:
        listed = _git("ls-files", "-z", "--", str(rel_folder))
        if listed is not None:
            tracked = {Path(n).relative_to(rel_folder) for n in listed.decode().split("\0") if n}
    differences = []
    for rel in sorted(new | old):
        if rel not in new:  # only in the committed folder: stale, unless nobody committed it
            if tracked is None or rel in tracked:
                differences.append(str(rel))
            continue
        expected = (fresh / rel).read_bytes()
        if rel in old and (committed / rel).read_bytes() == expected:
            continue
        if tracked is not None and rel in tracked and rel_folder is not None:
            if _git("show", f"HEAD:{(rel_folder / rel).as_posix()}") == expected:
                continue  # changed in the working copy only: the committed release is in sync
        differences.append(str(rel))
    return differences


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
