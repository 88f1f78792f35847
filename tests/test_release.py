"""The release: sources are clean, notebooks/ equals a fresh generation, and the student
copies hide what they should and run as a student meets them."""

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from grader.grading import pipeline
from grader.runtime import course

ASSIGNMENTS = course.assignments()


def test_every_curriculum_notebook_is_present_and_in_the_index():
    assert ASSIGNMENTS == [lesson.id for lesson in course.LESSONS]
    assert len(ASSIGNMENTS) == 11


def test_course_index_is_generated_and_the_readme_shows_it():
    assert (course.NOTEBOOKS / "README.md").read_text() == course.index_markdown()
    readme = (course.REPO / "README.md").read_text()
    assert course.index_table("notebooks/") in readme, (
        "README.md's course table differs from grader/runtime/course.py LESSONS: paste index_table('notebooks/')"
    )


@pytest.mark.parametrize("aid", ASSIGNMENTS)
def test_source_is_clean(aid):
    assert pipeline.source_problems(aid) == []


def test_committed_release_equals_a_fresh_generation():
    assert pipeline.release(check=True) == [], (
        "run `python -m grader release` and commit notebooks/"
    )


@pytest.mark.parametrize("aid", ASSIGNMENTS)
def test_student_copy_hides_solutions_and_hidden_tests(aid):
    nb = course.read(course.release_path(aid))
    text = nbformat.writes(nb)
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    assert "_hidden(" not in text
    for cell in course.solution_cells(nb):
        assert "raise NotImplementedError()" in cell.source
    assert "generated from the instructor" in nb.cells[0].source, (
        "the first cell carries the do-not-edit banner"
    )


@pytest.mark.parametrize("aid", ASSIGNMENTS)
def test_every_exercise_has_cpu_and_cuda_test_cells_with_points(aid):
    nb = course.read(course.source_path(aid))
    tests = {t.grade_id: t for t in course.test_cells(nb)}
    for cell in course.solution_cells(nb):
        sid = course.nbgrader_meta(cell)["grade_id"]
        assert f"test_{sid}" in tests, f"{sid} has no test cell"
        assert tests[f"test_{sid}"].points > 0
    assert all(t.points > 0 for t in tests.values())
    assert all(t.source.lstrip().startswith('"""') for t in tests.values()), (
        "test cells start with a docstring"
    )


@pytest.mark.parametrize("aid", ASSIGNMENTS)
def test_student_copy_runs_until_the_exercises(aid, tmp_path):
    """Demos run without error in the student copy; only the unsolved exercises' test cells
    fail: "not attempted yet", in one line (no traceback into the course's checks), or a check
    failure for a module-level answer."""
    nb = course.read(course.release_path(aid))
    client = NotebookClient(
        nb,
        timeout=600,
        allow_errors=True,
        resources={"metadata": {"path": str(course.NOTEBOOKS / aid)}},
    )
    client.execute()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.outputs if o.output_type == "error"]
        meta = course.nbgrader_meta(cell)
        if meta.get("solution"):
            # defining the function runs cleanly; a module-level answer raises at once
            assert [e.ename for e in errors] in ([], ["NotImplementedError"]), (
                f"{cell.id}: {errors}"
            )
        elif (
            meta.get("grade")
            and meta["grade_id"].endswith("_cuda")
            and not torch.cuda.is_available()
        ):
            # Without a GPU a student's CUDA cell says it was not checked and passes (it scores 0
            # under autograde: see test_pipeline.py).
            text = "".join(o.get("text", "") for o in cell.outputs)
            assert not errors and "NOT CHECKED here" in text, f"{cell.id}: {errors or text}"
        elif meta.get("grade"):
            assert errors, f"{cell.id} passes on the blank copy: a test that cannot fail"
            assert errors[0].ename in {"NameError", "NotAttempted", "CheckFailed"}, (
                f"{cell.id}: {errors[0].ename}"
            )
            if errors[0].ename == "NotAttempted":
                assert len(errors[0].traceback) == 1, errors[0].traceback
                assert "not attempted yet" in errors[0].evalue
        else:
            assert not errors, (
                f"demo cell {cell.id} fails in the student copy: {errors[0].ename}: {errors[0].evalue}"
            )


def _names(source: str) -> tuple[set[str], set[str]]:
    """(names a cell binds, names it reads before binding them itself), by its syntax tree."""
    import ast

    tree = ast.parse("\n".join(line for line in source.splitlines() if not line.startswith("%")))
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store) else read).add(node.id)
        elif isinstance(node, ast.arg):  # a parameter shadows the global of the same name
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return bound, read - bound


@pytest.mark.parametrize("aid", ASSIGNMENTS)
def test_demo_cells_define_nothing_a_later_cell_reads(aid):
    """Autograde skips unchanged `demo`-tagged cells: that is only safe if no later cell
    (demo cells aside) reads a name that a demo cell binds and nothing in between rebinds."""
    nb = course.read(course.source_path(aid))
    demos = set(course.demo_sources(nb))
    code = [c for c in nb.cells if c.cell_type == "code"]
    for i, cell in enumerate(code):
        if cell.source not in demos:
            continue
        live, _ = _names(cell.source)
        for later in code[i + 1 :]:
            if later.source in demos:
                continue
            bound, reads = _names(later.source)
            assert not (reads & live), (
                f"{aid} {later.get('id')} reads {sorted(reads & live)} bound by demo cell "
                f"{cell.get('id')}: untag it or rename"
            )
            live -= bound
