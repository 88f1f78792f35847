"""Where the course's files are, and how to read its notebooks' nbgrader cells.

Assignment ids are folder names (``01_devices``); each assignment folder holds one
notebook named after it: ``solutions/01_devices/01_devices.ipynb`` is the instructor
source, ``notebooks/01_devices/01_devices.ipynb`` the generated student copy.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .common import CUDA_SUFFIX

REPO = Path(__file__).resolve().parent.parent
SOLUTIONS = REPO / "solutions"
NOTEBOOKS = REPO / "notebooks"
IMAGES = REPO / "images"
WORK = REPO / "grader" / "work"

#: Files the notebooks write into their own folder when run (``%%writefile`` cells):
#: git-ignored, and never copied by nbgrader into a release or an autograded folder.
WRITTEN_FILES = ["ddp_script.py"]

_WRITEFILE = "%%writefile"


def assignments() -> list[str]:
    """Assignment ids in course order: the folders of ``solutions/`` holding a notebook."""
    if not SOLUTIONS.is_dir():
        raise FileNotFoundError(
            f"no solutions/ folder at {SOLUTIONS}: run from a full course checkout"
        )
    return sorted(p.name for p in SOLUTIONS.iterdir() if (p / f"{p.name}.ipynb").is_file())


def check_assignment(assignment_id: str) -> str:
    """Return ``assignment_id`` if it exists, else raise naming the ones that do.

    Raises:
        ValueError: unknown assignment id.
    """
    known = assignments()
    if assignment_id not in known:
        raise ValueError(
            f"unknown assignment {assignment_id!r}; the course has: {', '.join(known)}"
        )
    return assignment_id


def source_path(assignment_id: str) -> Path:
    """Path of the instructor source notebook of an assignment."""
    return SOLUTIONS / assignment_id / f"{assignment_id}.ipynb"


def release_path(assignment_id: str) -> Path:
    """Path of the committed student copy of an assignment."""
    return NOTEBOOKS / assignment_id / f"{assignment_id}.ipynb"


def read(path: Path) -> nbformat.NotebookNode:
    """Read a notebook as nbformat 4."""
    return nbformat.read(str(path), as_version=4)


def nbgrader_meta(cell) -> dict:
    """The cell's ``nbgrader`` metadata, or an empty dict."""
    return cell.get("metadata", {}).get("nbgrader", {})


def solution_cells(nb) -> list:
    """Code cells the student writes (``solution: true``), in notebook order."""
    return [c for c in nb.cells if c.cell_type == "code" and nbgrader_meta(c).get("solution")]


@dataclass(frozen=True)
class TestCell:
    """A graded test cell: its grade id, points and source."""

    grade_id: str
    points: float
    source: str

    @property
    def needs_cuda(self) -> bool:
        """Whether this cell checks something only a CUDA GPU can show."""
        return self.grade_id.endswith(CUDA_SUFFIX)


def test_cells(nb) -> list[TestCell]:
    """Autograded test cells (``grade: true`` code cells without a solution)."""
    out = []
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            out.append(TestCell(meta["grade_id"], float(meta.get("points", 0)), cell.source))
    return out


def strip_solution_markers(source: str) -> str:
    """Drop the ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines of a source cell."""
    keep = [
        line
        for line in source.splitlines()
        if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")
    ]
    return "\n".join(keep)


def split_writefile(source: str) -> tuple[str | None, str]:
    """Split a ``%%writefile <path>`` cell into its path and the file's text.

    Returns:
        ``(path, body)`` for a ``%%writefile`` cell, ``(None, source)`` for any other cell.
    """
    first, _, body = source.partition("\n")
    if first.startswith(_WRITEFILE + " "):
        return first[len(_WRITEFILE) :].strip(), body
    return None, source


def writefile_line(source: str) -> str | None:
    """The ``%%writefile <path>`` line a cell starts with, or None."""
    path, _ = split_writefile(source)
    return f"{_WRITEFILE} {path}" if path else None


@functools.cache
def reference(assignment_id: str) -> types.SimpleNamespace:
    """The reference solution of an assignment, loaded from its source notebook.

    The solution cells of ``solutions/<id>/<id>.ipynb`` are executed, in order, in a
    fresh namespace (each solution cell imports what it uses), so the reference
    exists once, in ``solutions/``, and hidden tests compare against it. A
    ``%%writefile`` cell (a script) is executed as a module body: its functions are
    defined, its ``if __name__ == "__main__":`` block does not run.

    Returns:
        A namespace with the reference's functions and constants as attributes.

    Raises:
        ValueError: unknown assignment id.
        FileNotFoundError: the source notebook is missing.
    """
    check_assignment(assignment_id)
    nb = read(source_path(assignment_id))
    namespace: dict = {"__name__": f"reference_{assignment_id}"}
    for cell in solution_cells(nb):
        _, body = split_writefile(cell.source)
        code = compile(
            strip_solution_markers(body),
            f"<reference {assignment_id}:{nbgrader_meta(cell)['grade_id']}>",
            "exec",
            dont_inherit=True,  # no `from __future__ import annotations` from this module
        )
        exec(code, namespace)  # noqa: S102 - the course's own reference solutions
    # The functions keep `namespace` as their globals, __builtins__ included (tracers such as
    # torch._dynamo read it), so filter a copy.
    return types.SimpleNamespace(**{k: v for k, v in namespace.items() if k != "__builtins__"})
