"""Taking a submission in (grader.grading.intake): only the notebook, read without following links,
rebuilt valid, its graded cells matched to the release. Fast, no kernels."""

from __future__ import annotations

import copy
import json

import nbformat
import pytest

from grader.grading import intake
from grader.grading.release import student_copy
from grader.runtime import course
from grader.tools import samples

A = "03_streams"


def _write(folder, nb=None, name=f"{A}.ipynb"):
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb or samples.build_submission(A, None), str(folder / name))
    return folder


def _grade_ids(nb):
    return [course.nbgrader_meta(c).get("grade_id") for c in nb.cells if course.nbgrader_meta(c)]


def test_a_clean_submission_comes_through_unchanged_but_for_outputs(tmp_path):
    nb = samples.build_submission(A, None)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="x" * 1000)]
    taken = intake.take_in(_write(tmp_path / "s", nb), A)
    assert taken.notebook is not None and not taken.notes and not taken.review
    assert _grade_ids(taken.notebook) == _grade_ids(nb)
    assert all(not c.get("outputs") for c in taken.notebook.cells if c.cell_type == "code")
    assert [c.source for c in taken.notebook.cells] == [c.source for c in nb.cells]


def test_other_files_are_listed_not_used_and_module_names_flagged(tmp_path):
    folder = _write(tmp_path / "s")
    (folder / "grader").mkdir()
    (folder / "grader" / "__init__.py").write_text("")
    (folder / "notes.txt").write_text("hi")
    taken = intake.take_in(folder, A)
    assert taken.notebook is not None
    assert any("not used" in n and "grader" in n and "notes.txt" in n for n in taken.notes)
    assert any("grader" in r for r in taken.review)


def test_links_are_not_followed(tmp_path):
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / f"{A}.ipynb").symlink_to(course.source_path(A))
    taken = intake.take_in(folder, A)
    assert taken.notebook is None
    assert any("link" in n for n in taken.notes) and taken.review


def test_renamed_and_ambiguous_notebooks(tmp_path):
    taken = intake.take_in(_write(tmp_path / "a", name=f"{A}-Copy1.ipynb"), A)
    assert taken.notebook is not None and "renamed" in taken.notes[0]
    folder = _write(tmp_path / "b", name="one.ipynb")
    _write(folder, name="two.ipynb")
    taken = intake.take_in(folder, A)
    assert taken.notebook is None and "several" in taken.notes[0]
    assert intake.take_in(tmp_path / "nowhere", A).notebook is None


@pytest.mark.parametrize(
    "data, says",
    [(b"\x00\xff garbage", "not a readable notebook"), (b"[1, 2]", "not a JSON object"),
     (b'{"cells": 3}', "invalid notebook")],
)  # fmt: skip
def test_unreadable_files_are_missing_with_the_reason(tmp_path, data, says):
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / f"{A}.ipynb").write_bytes(data)
    taken = intake.take_in(folder, A)
    assert taken.notebook is None and any(says in n for n in taken.notes)


def test_too_large_a_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(intake, "MAX_NOTEBOOK_BYTES", 1000)
    taken = intake.take_in(_write(tmp_path / "s"), A)
    assert taken.notebook is None and "MiB" in taken.notes[0]


def _write_raw(tmp_path, raw) -> object:
    folder = tmp_path / "s"
    folder.mkdir(parents=True)
    (folder / f"{A}.ipynb").write_text(json.dumps(raw))
    return folder


def test_errors_in_what_is_dropped_are_rebuilt_valid(tmp_path):
    """Outputs, execution counts, ids, the minor version and unknown fields are not graded:
    the notebook is rebuilt without them, whatever they hold, and graded as usual."""
    raw = json.loads(nbformat.writes(samples.build_submission(A, None)))
    raw["nbformat_minor"] = 99
    raw["extra"] = {"anything": 1}
    raw["metadata"] = "not an object"
    for cell in raw["cells"]:
        cell.pop("id", None)
        cell.pop("outputs", None)
        cell["execution_count"] = "three"
        cell["attachments"] = 7
    taken = intake.take_in(_write_raw(tmp_path, raw), A)
    assert taken.notebook is not None and not taken.review and not taken.notes
    nbformat.validate(taken.notebook)
    assert _grade_ids(taken.notebook) == _grade_ids(samples.build_submission(A, None))


def _break(how: str):
    def cells(raw):
        return [c for c in raw["cells"] if course.nbgrader_meta(c).get("solution")]

    def apply(raw):
        if how == "source":  # the answers written as objects by a broken tool
            for cell in cells(raw):
                cell["source"] = {"lines": cell["source"]}
        elif how == "source_lines":
            cells(raw)[0]["source"] = ["def f():\n", 42]
        elif how == "cell_type":
            cells(raw)[0]["cell_type"] = "python"
        elif how == "not_a_cell":
            raw["cells"].insert(3, "print('hello')")
        elif how == "metadata":
            cells(raw)[0]["metadata"] = ["nbgrader"]
        elif how == "no_version":
            del raw["nbformat"]
        elif how == "future_version":
            raw["nbformat"] = 5
        elif how == "cells":
            raw["cells"] = {str(i): c for i, c in enumerate(raw["cells"])}

    return apply


@pytest.mark.parametrize(
    "how, says",
    [("source", "].source: dict {'lines'"), ("source_lines", "42 is not of type 'string'"),
     ("cell_type", "'code', 'markdown' or 'raw'"), ("not_a_cell", "not a cell"),
     ("metadata", "is not of type 'object'"), ("no_version", "'nbformat' is a required property"),
     ("future_version", "5 is greater than the maximum of 4"), ("cells", "dict {'0'")],
)  # fmt: skip
def test_an_invalid_notebook_is_reported_with_nbformats_reason_and_not_flagged(tmp_path, how, says):
    """What grading reads must be valid nbformat: otherwise nothing is graded (status missing,
    0 points), the report says "invalid notebook: <the validation error>", and the submission
    is not flagged for tampering (the nbgrader metadata is never compared)."""
    raw = json.loads(nbformat.writes(samples.build_submission(A, None)))
    for cell in raw["cells"]:  # also metadata that would be flagged in a valid notebook
        if course.nbgrader_meta(cell).get("grade"):
            cell["metadata"]["nbgrader"]["points"] = str(cell["metadata"]["nbgrader"]["points"])
    _break(how)(raw)
    taken = intake.take_in(_write_raw(tmp_path, raw), A)
    assert taken.notebook is None and not taken.review, (taken.notes, taken.review)
    assert len(taken.notes) == 1 and taken.notes[0].startswith("invalid notebook: "), taken.notes
    assert says in taken.notes[0], taken.notes[0]
    assert intake.invalid_reason(raw) in taken.notes[0]


def test_an_nbformat_3_notebook_is_converted_and_graded(tmp_path):
    nb = samples.build_submission(A, None)
    raw = json.loads(nbformat.writes(nbformat.convert(copy.deepcopy(nb), 3)))
    taken = intake.take_in(_write_raw(tmp_path, raw), A)
    assert taken.notebook is not None and not taken.review
    assert taken.notes == ["an nbformat 3 notebook: converted to nbformat 4"]
    assert _grade_ids(taken.notebook) == _grade_ids(nb)
    raw["worksheets"] = 5
    taken = intake.take_in(_write_raw(tmp_path / "b", raw), A)
    assert taken.notebook is None and taken.notes[0].startswith("invalid notebook: ")


def test_tampered_metadata_is_restored_and_flagged(tmp_path):
    nb = samples.build_submission(A, None)
    for cell in nb.cells:
        meta = course.nbgrader_meta(cell)
        if meta.get("grade_id") == "test_run_on_streams":
            meta["points"] = 100
        if meta.get("grade_id") == "test_prefetch_to_device":
            meta.update(grade=False, solution=True, locked=False)
            cell.source = "pass"
    taken = intake.take_in(_write(tmp_path / "s", nb), A)
    release = {
        course.nbgrader_meta(c)["grade_id"]: c
        for c in course.read(student_copy(A)).cells
        if course.nbgrader_meta(c)
    }
    for cell in taken.notebook.cells:
        meta = course.nbgrader_meta(cell)
        if meta:
            assert meta == course.nbgrader_meta(release[meta["grade_id"]])
            if not meta.get("solution"):
                assert cell.source == release[meta["grade_id"]].source
    assert any("points 100 -> 3" in n for n in taken.notes)
    assert taken.review


def test_renamed_grade_ids_and_duplicates_become_the_students_own_cells(tmp_path):
    nb = samples.build_submission(A, None)
    test = next(
        c for c in nb.cells if course.nbgrader_meta(c).get("grade_id") == "test_run_on_streams"
    )
    test.metadata["nbgrader"]["grade_id"] = "mine"
    answer = next(
        c for c in nb.cells if course.nbgrader_meta(c).get("grade_id") == "run_on_streams"
    )
    twin = copy.deepcopy(answer)
    twin["id"] = "twin"
    twin.source = "def run_on_streams(fns):\n    return []\n"
    nb.cells.insert(nb.cells.index(answer) + 1, twin)
    taken = intake.take_in(_write(tmp_path / "s", nb), A)
    ids = _grade_ids(taken.notebook)
    assert ids.count("run_on_streams") == 1 and "mine" not in ids
    assert "test_run_on_streams" in ids  # put back where it was
    kept = next(
        c
        for c in taken.notebook.cells
        if course.nbgrader_meta(c).get("grade_id") == "run_on_streams"
    )
    assert kept.source == answer.source  # the first copy is graded
    text = " ".join(taken.notes)
    assert "mine" in text and "second copies" in text and "deleted cells restored" in text


def test_deleted_answer_cells_come_back_in_place(tmp_path):
    nb = samples.build_submission(A, None)
    nb.cells = [
        c for c in nb.cells if course.nbgrader_meta(c).get("grade_id") != "prefetch_to_device"
    ]
    taken = intake.take_in(_write(tmp_path / "s", nb), A)
    assert _grade_ids(taken.notebook) == _grade_ids(course.read(student_copy(A)))
