"""Merge the working folders of shards into the course gradebook: ``python -m grader merge``.

A class too large for one machine is graded in shards (``python -m grader autograde
--shard K/N --work SHARD_DIR``, one per node of a Slurm array or a Kubernetes Indexed Job), and
its CUDA cells can go to GPU nodes alone (``--only-cuda`` there, ``--no-cuda`` elsewhere). Each
shard's working folder holds its own gradebook, manifest and autograded notebooks. This module
combines them into one working folder (by default ``grader/work``):

* per submission (student, assignment), the scores of every test cell from the shard that
  graded it (a cell *deferred* by one shard is taken from another; when two shards graded the
  same cell of the same submission, the one that graded it last wins);
* the scores written to the gradebook with nbgrader's ``Gradebook`` API, under the student's
  real name, flagged submissions marked as needing manual grading (as a single-machine
  autograde writes them), the autograded notebooks copied (cell outputs taken from the shard
  that graded each cell), the manifest and one report.

Merging is idempotent: merging the same shards again, or a shard that was graded again with
the same content, changes nothing; a submission missing from every shard is reported.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from grader.grading.config import api_for, course_config
from grader.grading.grading import MANIFEST, load_manifest, save_manifest, write_result
from grader.grading.pipeline import generate
from grader.grading.report import Result
from grader.runtime import course


class MergeError(ValueError):
    """The shards cannot be merged (the message says why)."""


@dataclass
class _Combined:
    result: Result
    notebook_from: dict[str, Path] = field(default_factory=dict)  # grade id -> notebook file
    base: Path | None = None


def _graded_cells(result: Result) -> set[str]:
    return set(result.cells) - set(result.deferred)


def combine(shards: list[Path]) -> dict[str, _Combined]:
    """The combined result of every submission found in the shards' manifests.

    Raises:
        MergeError: a folder is not a shard's working folder.
    """
    combined: dict[str, _Combined] = {}
    for shard in shards:
        shard = Path(shard)
        if not (shard / MANIFEST).is_file():
            raise MergeError(f"{shard} has no {MANIFEST}: not the working folder of a graded shard")
        for key, entry in sorted(load_manifest(shard).items()):
            result = Result(**entry)
            notebook = shard / "autograded" / result.student / result.assignment
            notebook = notebook / f"{result.assignment}.ipynb"
            here = _graded_cells(result)
            if key not in combined:
                combined[key] = _Combined(copy.deepcopy(result))
                combined[key].base = notebook if notebook.is_file() else None
                combined[key].notebook_from = {c: notebook for c in here}
                continue
            into = combined[key]
            merged = into.result
            if result.status == "missing" and merged.status != "missing":
                continue
            for cell in here:
                merged.cells[cell] = result.cells[cell]
                into.notebook_from[cell] = notebook
            merged.deferred = sorted(set(merged.deferred) - here)
            merged.not_checked = sorted((set(merged.not_checked) - here) | set(result.not_checked))
            for attr in ("notes", "review"):
                values = getattr(merged, attr)
                values += [v for v in getattr(result, attr) if v not in values]
            merged.seconds = round(merged.seconds + result.seconds, 1)
            if into.base is None and notebook.is_file():
                into.base = notebook
    for item in combined.values():
        r = item.result
        r.score = sum(r.cells.values())
        maxima = _max_points(r.assignment)
        r.failed_cells = sorted(c for c, v in r.cells.items() if v < maxima.get(c, 0))
        r.status = "missing" if r.status == "missing" else "graded"
    return combined


def _max_points(assignment: str) -> dict[str, float]:
    return {
        t.grade_id: t.points for t in course.test_cells(course.read(course.source_path(assignment)))
    }


def _merged_notebook(item: _Combined, folder: Path) -> Path | None:
    """Write the autograded notebook with each test cell's outputs from the shard that graded
    it; return its folder."""
    if item.base is None:
        return None
    nb = nbformat.read(str(item.base), as_version=4)
    cache: dict[Path, dict] = {}
    for cell in nb.cells:
        grade_id = course.nbgrader_meta(cell).get("grade_id")
        source = item.notebook_from.get(grade_id)
        if not grade_id or source is None or source == item.base:
            continue
        if source not in cache:
            other = nbformat.read(str(source), as_version=4)
            cache[source] = {course.nbgrader_meta(c).get("grade_id"): c for c in other.cells}
        match = cache[source].get(grade_id)
        if match is not None and cell.cell_type == "code":
            cell.outputs = match.get("outputs", [])
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(folder / item.base.name))
    return folder


def merge(shards: list[Path], work: Path | None = None) -> list[Result]:
    """Merge shard working folders into the gradebook of ``work`` (see the module docstring).

    Returns:
        The merged results, one per submission, sorted by student and assignment.

    Raises:
        MergeError: no shard given, or a folder is not a shard's working folder.
    """
    if not shards:
        raise MergeError("name at least one shard's working folder")
    combined = combine([Path(s).resolve() for s in shards])
    config = course_config(work)
    api_for(config)
    target = Path(config.CourseDirectory.autograded_directory).parent
    aids = sorted({item.result.assignment for item in combined.values()})
    with tempfile.TemporaryDirectory(prefix="merge-release-") as tmp:
        for aid in aids:  # registers the assignments (and their test cells) in the gradebook
            generate(aid, Path(tmp), config=config, use_db=True)
    manifest = load_manifest(target)
    scratch = target / "staging" / "_merge"
    results = []
    for key, item in sorted(combined.items()):
        result = item.result
        folder = _merged_notebook(item, scratch / key.replace("/", "__"))
        write_result(result, config, folder)  # the same scores again change nothing
        manifest[key] = asdict(result)
        results.append(result)
    save_manifest(target, manifest)
    shutil.rmtree(scratch, ignore_errors=True)
    return results


def write_summary(results: list[Result], path: Path) -> Path:
    """Save the merged results as JSON (one object per submission)."""
    Path(path).write_text(json.dumps([asdict(r) for r in results], indent=1))
    return Path(path)
