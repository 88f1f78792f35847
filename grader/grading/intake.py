"""Take a submission in: only its notebook, read safely, made to match the release.

Before a submission is graded, the grading process (never the student's kernel) turns the
submission folder into one clean notebook:

* **only the notebook** is taken. Other files of the folder (a ``grader/`` package, an
  ``ipykernel_launcher.py``, data, links) are listed in the report and never copied next to
  the graded notebook, so nothing the student ships can replace a module the kernel imports;
* the notebook is read **without following links** (a link named like the notebook is refused),
  up to :data:`MAX_NOTEBOOK_BYTES`, as JSON. An unreadable file is reported as *missing* with
  the reason. What grading reads of it must be **valid nbformat** (:func:`invalid_reason`:
  the format version, the list of cells, each cell's type, source and metadata object, checked
  against nbformat's own schema); otherwise the submission is reported as *missing* with
  ``invalid notebook: <the validation error>`` and scores 0, without being flagged (a notebook
  nbformat rejects is broken, not tampered with: nothing in it was graded). It is then
  **rebuilt as a valid nbformat 4 notebook** from its cells' types, sources and nbgrader
  metadata: outputs, execution counts, attachments, ids and any other field are dropped
  whatever they hold (the autograde runs every cell again), so an error there costs nothing;
* its **nbgrader cells are made to match the release**: a solution cell keeps the student's
  code but gets the release's nbgrader metadata back (points, grade id, flags), any other
  nbgrader cell (test cells, read-only cells) is the release's cell, a cell with an unknown
  grade id or a second copy of one becomes an ordinary cell of the student's, and a deleted
  nbgrader cell is put back where it was. Every change is named in the report; a change of
  points or of what is graded is also flagged for review.

nbgrader then restores the test cells from the gradebook as usual; this step makes sure a
tampered or broken notebook gets a graded result instead of failing the grading run.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import stat
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode, v4

from grader.runtime import course

#: The largest notebook file taken, bytes.
MAX_NOTEBOOK_BYTES = 64 * 2**20
#: Names inside a submission folder that are editor or system leftovers, not worth a note.
JUNK = {".ipynb_checkpoints", "__pycache__", ".DS_Store", "Thumbs.db"}
#: nbgrader metadata keys whose change alters what is graded or how much it is worth.
_GRADING_KEYS = ("grade", "solution", "locked", "points", "task", "grade_id")


@dataclass
class Intake:
    """The result of taking a submission in.

    Attributes:
        notebook: The notebook to grade, or None when there is none to grade.
        notes: What the report says about the submission (in words).
        review: Reasons to flag the submission for review.
    """

    notebook: NotebookNode | None = None
    notes: list[str] = field(default_factory=list)
    review: list[str] = field(default_factory=list)


def _listing(folder: Path) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as entries:
            return sorted(entries, key=lambda e: e.name)
    except OSError:
        return []


def _link_target(entry: os.DirEntry) -> str:
    try:
        return os.readlink(entry.path)[:200]
    except OSError:
        return "?"


def _is_notebook_file(entry: os.DirEntry) -> bool:
    return entry.name.endswith(".ipynb") and entry.is_file(follow_symlinks=False)


def _read_bytes(path: Path) -> bytes:
    """Read a regular file without following a link at its last component.

    Raises:
        OSError: a link, not a regular file, or larger than MAX_NOTEBOOK_BYTES.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError("not a regular file")
        if info.st_size > MAX_NOTEBOOK_BYTES:
            raise OSError(
                f"{info.st_size / 2**20:.0f} MiB, more than the {MAX_NOTEBOOK_BYTES >> 20} MiB "
                "a notebook may have"
            )
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_NOTEBOOK_BYTES:
                raise OSError(f"more than {MAX_NOTEBOOK_BYTES >> 20} MiB")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _text(value) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return value if isinstance(value, str) else ""


class InvalidNotebook(ValueError):
    """The parts of a notebook that grading reads break nbformat's schema."""


@functools.cache
def _schema() -> dict:
    """nbformat's own JSON schema of the newest nbformat 4 notebook."""
    folder = Path(v4.__file__).parent
    return json.loads((folder / v4.nbformat_schema[(None, None)]).read_text())


def _first_error(instance, schema: dict) -> tuple[str, list] | None:
    """The most relevant error of ``instance`` against ``schema``: (message, path), or None."""
    from jsonschema import exceptions, validators

    validator = validators.validator_for(_schema())(schema)
    error = exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return None
    message, shown = error.message, repr(error.instance)
    if len(shown) > 60 and message.startswith(shown):  # a whole cell or list of cells
        message = f"{type(error.instance).__name__} {shown[:40]}...{message[len(shown) :]}"
    return message, list(error.absolute_path)


def _where(path: list) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out


def invalid_reason(raw: dict) -> str:
    """Why the parts of a parsed notebook that grading reads are not valid nbformat 4 (as
    nbformat's schema says it), or "" when they are.

    Checked: the ``nbformat`` version, the list of cells, and each cell's ``cell_type``,
    ``source`` and ``metadata`` (an object). Not checked, because the notebook is rebuilt
    without them: outputs, execution counts, attachments, cell ids, the notebook's metadata,
    ``nbformat_minor`` and unknown fields.
    """
    schema = _schema()
    top = {
        "nbformat_minor": schema["properties"]["nbformat_minor"].get("minimum", 5),
        "metadata": {},
    }
    if "nbformat" in raw:
        top["nbformat"] = raw["nbformat"]
    if "cells" in raw:  # the cells one by one below, for errors that name their part
        top["cells"] = [] if isinstance(raw["cells"], list) else raw["cells"]
    error = _first_error(top, schema)
    if error is not None:
        message, path = error
        return f"{_where(path) + ': ' if path else ''}{message}"
    for index, cell in enumerate(raw["cells"]):
        where = f"cells[{index}]"
        if not isinstance(cell, dict):
            return f"{where}: {json.dumps(cell)[:60]} is not a cell (a JSON object)"
        kind = cell.get("cell_type")
        if kind not in ("code", "markdown", "raw"):
            what = f"cell_type {json.dumps(kind)[:40]}" if "cell_type" in cell else "no cell_type"
            return f"{where}: {what}: a cell is 'code', 'markdown' or 'raw'"
        view = {k: cell[k] for k in ("cell_type", "source", "metadata") if k in cell}
        view["id"] = f"cell-{index}"
        if isinstance(view.get("metadata"), dict):
            view["metadata"] = {}  # its nbgrader part is matched to the release, not to nbformat
        if kind == "code":
            view.update(outputs=[], execution_count=None)
        part = {"$ref": f"#/definitions/{kind}_cell", "definitions": schema["definitions"]}
        error = _first_error(view, part)
        if error is not None:
            message, path = error
            return f"{_where(['cells', index, *path])}: {message}"
    return ""


def _as_v4(raw: dict) -> tuple[dict, list[str]]:
    """``raw`` as an nbformat 4 document (an nbformat 3 one converted by nbformat).

    Raises:
        InvalidNotebook: what grading reads is not valid nbformat (see :func:`invalid_reason`).
    """
    notes = []
    if raw.get("nbformat") == 3:
        try:
            raw = json.loads(json.dumps(v4.upgrade(nbformat.from_dict(copy.deepcopy(raw)))))
        except Exception as exc:  # noqa: BLE001 - nbformat's converter trusts its input
            raise InvalidNotebook(
                f"an nbformat 3 notebook nbformat cannot convert: {type(exc).__name__}: {exc}"
            ) from None
        notes.append("an nbformat 3 notebook: converted to nbformat 4")
    reason = invalid_reason(raw)
    if reason:
        raise InvalidNotebook(reason)
    return raw, notes


def _rebuild(raw: dict) -> tuple[NotebookNode, list[str]]:
    """A valid nbformat 4 notebook from the cells of a parsed JSON document.

    Raises:
        InvalidNotebook: see :func:`_as_v4`.
    """
    raw, notes = _as_v4(raw)
    cells = raw["cells"]
    nb = v4.new_notebook()
    nb.metadata = {"language_info": {"name": "python"}}
    kernelspec = (
        raw.get("metadata", {}).get("kernelspec") if isinstance(raw.get("metadata"), dict) else None
    )
    if isinstance(kernelspec, dict) and kernelspec.get("name") == "python3":
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
    for cell in cells:
        source = _text(cell.get("source", ""))
        if cell["cell_type"] == "code":
            new = v4.new_code_cell(source)
        elif cell["cell_type"] == "markdown":
            new = v4.new_markdown_cell(source)
        else:
            new = v4.new_raw_cell(source)
        meta = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        nbg = meta.get("nbgrader")
        if isinstance(nbg, dict):
            new.metadata["nbgrader"] = json.loads(json.dumps(nbg, default=str))
        tags = meta.get("tags")
        if isinstance(tags, list) and all(isinstance(t, str) for t in tags):
            new.metadata["tags"] = list(tags)
        cid = cell.get("id")
        if isinstance(cid, str) and 1 <= len(cid) <= 64:
            new["id"] = cid
        nb.cells.append(new)
    return nb, notes


def _nbgrader(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def _difference(student: dict, release: dict) -> list[str]:
    out = []
    for key in _GRADING_KEYS:
        if student.get(key) != release.get(key):
            out.append(f"{key} {student.get(key)!r} -> {release.get(key)!r}")
    return out


def normalize(
    nb: NotebookNode, assignment: str, release: Path | None = None
) -> tuple[NotebookNode, list[str], list[str]]:
    """Make the nbgrader cells of ``nb`` match the release of ``assignment`` (see the module
    docstring): the student copy at ``release``, by default the one the release step generates
    from ``solutions/`` (:func:`grader.grading.release.student_copy`; never ``notebooks/``).

    Returns:
        ``(notebook, notes, review reasons)``.
    """
    from grader.grading.release import student_copy  # nbgrader's import, only when grading

    release = course.read(release or student_copy(assignment))
    order = [c for c in release.cells if _nbgrader(c).get("grade_id")]
    by_id = {_nbgrader(c)["grade_id"]: c for c in order}
    notes: list[str] = []
    review: list[str] = []
    seen: set[str] = set()
    out: list[NotebookNode] = []
    changed, unknown, duplicates, restored_cells = [], [], [], []
    for cell in nb.cells:
        meta = _nbgrader(cell)
        grade_id = meta.get("grade_id")
        if not meta:
            cell.metadata.pop("nbgrader", None)
            out.append(cell)
            continue
        if grade_id not in by_id or grade_id in seen:
            (duplicates if grade_id in seen else unknown).append(str(grade_id))
            cell.metadata.pop("nbgrader", None)
            out.append(cell)
            continue
        seen.add(grade_id)
        rel = by_id[grade_id]
        rel_meta = _nbgrader(rel)
        difference = _difference(meta, rel_meta)
        if difference:
            changed.append(f"{grade_id} ({', '.join(difference)})")
        if rel_meta.get("solution"):
            kept = copy.deepcopy(rel)
            kept.source = cell.source if cell.cell_type == rel.cell_type else rel.source
            if cell.cell_type != rel.cell_type:
                restored_cells.append(grade_id)
            out.append(kept)
        else:
            if cell.source != rel.source or cell.cell_type != rel.cell_type:
                restored_cells.append(grade_id)
            out.append(copy.deepcopy(rel))
    missing = [g for g in by_id if g not in seen]
    for grade_id in missing:  # put back after the release cell that precedes it
        rel = by_id[grade_id]
        position = len(out)
        index = release.cells.index(rel)
        for previous in reversed(release.cells[:index]):
            prev_id = _nbgrader(previous).get("grade_id") or previous.get("id")
            match = next(
                (
                    i
                    for i, c in enumerate(out)
                    if (_nbgrader(c).get("grade_id") or c.get("id")) == prev_id
                ),
                None,
            )
            if match is not None:
                position = match + 1
                break
        out.insert(position, copy.deepcopy(rel))
    nb.cells = out
    if changed:
        notes.append(f"changed nbgrader metadata restored from the release: {'; '.join(changed)}")
        review.append("nbgrader metadata of graded cells was changed by hand (restored)")
    if restored_cells:
        notes.append(f"edited course cells restored from the release: {', '.join(restored_cells)}")
    if missing:
        notes.append(f"deleted cells restored from the release: {', '.join(missing)}")
    if unknown:
        review.append("grade ids the assignment does not have (changed by hand?)")
        notes.append(
            f"cells with grade ids the assignment does not have, graded as your own code: "
            f"{', '.join(unknown)}"
        )
    if duplicates:
        notes.append(
            f"second copies of graded cells, graded as your own code: {', '.join(duplicates)}"
        )
    return nb, notes, review


def _unique_ids(nb: NotebookNode) -> None:
    seen = set()
    for cell in nb.cells:
        cid = cell.get("id")
        if not isinstance(cid, str) or cid in seen or not _valid_id(cid):
            cid = uuid.uuid4().hex[:12]
            cell["id"] = cid
        seen.add(cid)


def _valid_id(cid: str) -> bool:
    return 1 <= len(cid) <= 64 and all(c.isalnum() or c in "-_" for c in cid)


def take_in(folder: Path, assignment: str, release: Path | None = None) -> Intake:
    """Read a submission folder of ``assignment`` into the notebook to grade (see the module
    docstring), matched to the student copy at ``release`` (:func:`normalize`). Never raises
    for anything in the folder: problems become notes."""
    folder = Path(folder)
    result = Intake()
    entries = _listing(folder)
    expected = f"{assignment}.ipynb"
    chosen: os.DirEntry | None = None
    exact = next((e for e in entries if e.name == expected), None)
    if exact is not None and _is_notebook_file(exact):
        chosen = exact
    elif exact is not None and exact.is_symlink():
        result.notes.append(f"{expected} is a link: links are not followed")
        result.review.append(f"{expected} is a link (to {_link_target(exact)})")
    elif exact is not None:
        result.notes.append(f"{expected} is not a file")
    if chosen is None:
        others = [e for e in entries if _is_notebook_file(e) and not e.name.startswith(".")]
        if len(others) == 1:
            chosen = others[0]
            result.notes.append(f"renamed notebook: graded {chosen.name} as {expected}")
        elif others:
            names = ", ".join(e.name for e in others)
            result.notes.append(f"no {expected}; several other notebooks ({names}): not graded")
            return result
        elif exact is None:
            result.notes.append(f"no notebook in the submission (expected {expected})")
            return result
        else:
            return result
    ignored = [e.name for e in entries if e.name != chosen.name and e.name not in JUNK]
    if ignored:
        shown = ", ".join(ignored[:8]) + (
            f" and {len(ignored) - 8} more" if len(ignored) > 8 else ""
        )
        result.notes.append(f"files beside the notebook were not used: {shown}")
        shadowing = [
            n
            for n in ignored
            if n.removesuffix(".py") in _IMPORTABLE or n.endswith((".pth", ".so"))
        ]
        if shadowing:
            result.review.append(
                f"the submission ships files named like modules the kernel imports ({', '.join(shadowing)}); "
                "they were not used"
            )
    try:
        data = _read_bytes(folder / chosen.name)
        raw = json.loads(data.decode("utf-8"))
        if not isinstance(raw, dict):
            raise ValueError("the file is not a JSON object")
        nb, notes = _rebuild(raw)
    except InvalidNotebook as exc:
        result.notes.append(f"invalid notebook: {str(exc)[:300]}")
        return result
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        result.notes.append(f"not a readable notebook: {type(exc).__name__}: {str(exc)[:200]}")
        return result
    result.notes += notes
    nb, notes, review = normalize(nb, assignment, release)
    result.notes += notes
    result.review += review
    _unique_ids(nb)
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:  # pragma: no cover - _rebuild makes valid cells
        result.notes.append(f"not a valid notebook after repair: {str(exc).splitlines()[0][:200]}")
        return result
    result.notebook = nb
    return result


#: Names a shipped file could use to shadow what a kernel imports.
_IMPORTABLE = {
    "grader",
    "ipykernel_launcher",
    "ipykernel",
    "IPython",
    "sitecustomize",
    "usercustomize",
    "torch",
    "numpy",
    "nbformat",
    "jupyter_client",
    "traitlets",
    "zmq",
    "tornado",
}
