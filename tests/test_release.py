"""The release: sources are clean, notebooks/ equals a fresh generation, and the student
copies hide what they should and run as a student meets them."""

import contextlib
import json
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import nbformat
import pytest
import torch
from nbclient import NotebookClient

from grader.grading import pipeline, release
from grader.runtime import course

ASSIGNMENTS = course.assignments()


def test_every_curriculum_notebook_is_present_and_in_the_index():
    assert ASSIGNMENTS == [lesson.id for lesson in course.LESSONS]
    assert len(ASSIGNMENTS) == 13


def test_course_index_is_generated_and_the_readme_shows_it():
    assert (course.NOTEBOOKS / "README.md").read_text() == course.index_markdown()
    readme = (course.REPO / "README.md").read_text()
    assert course.index_table("notebooks/") in readme, (
        "README.md's course table differs from grader/runtime/course.py LESSONS: paste index_table('notebooks/')"
    )


@pytest.mark.parametrize("aid, following", list(zip(ASSIGNMENTS, ASSIGNMENTS[1:])))
def test_every_notebook_ends_with_a_link_to_the_next(aid, following):
    last = course.read(course.source_path(aid)).cells[-1]
    link = f"](../{following}/{following}.ipynb)"
    assert last.cell_type == "markdown" and link in last.source.strip().splitlines()[-1]
    assert (course.NOTEBOOKS / following / f"{following}.ipynb").is_file()
    assert "last notebook" not in course.read(course.source_path(aid)).cells[-1].source


@pytest.mark.parametrize("aid", ASSIGNMENTS)
def test_source_is_clean(aid):
    assert pipeline.source_problems(aid) == []


def test_committed_release_equals_a_fresh_generation():
    assert pipeline.release(check=True) == [], (
        "run `python -m grader release` and commit notebooks/"
    )


def _git_checkout() -> bool:
    done = subprocess.run(
        ["git", "-C", str(course.REPO), "ls-files", "--error-unmatch", "notebooks/README.md"],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def test_release_differences_ignore_what_jupyter_writes_and_see_real_changes(tmp_path):
    """Outside a git checkout: checkpoints, caches and hidden files are not part of a release; a
    changed, missing or extra file is."""
    fresh, committed = tmp_path / "fresh", tmp_path / "committed"
    for folder in (fresh, committed):
        (folder / "img").mkdir(parents=True)
        (folder / "a.ipynb").write_text("{}")
        (folder / "img" / "d.png").write_bytes(b"png")
    for junk in (
        ".ipynb_checkpoints/a-checkpoint.ipynb",
        "__pycache__/x.pyc",
        ".virtual_documents/a",
    ):
        (committed / junk).parent.mkdir(parents=True, exist_ok=True)
        (committed / junk).write_text("x")
    (committed / "ddp_script.py").write_text("x")
    (committed / "perfetto_traces").mkdir()
    (committed / "perfetto_traces" / "unfused_step.json").write_text("{}")
    assert release.release_differences(fresh, committed) == []
    (committed / "img" / "d.png").write_bytes(b"other")
    (committed / "notes.py").write_text("x")  # outside git, an extra file is a stale release file
    (fresh / "new.md").write_text("x")
    assert release.release_differences(fresh, committed) == ["img/d.png", "new.md", "notes.py"]


def test_release_differences_in_a_checkout_compare_with_the_committed_version(tmp_path):
    """In the git checkout: a release file changed only in the working copy (a student's saved
    work) is in sync when its committed version is the fresh one; a fresh generation that
    differs from both is a difference, and so is a tracked file the generation no longer has."""
    if not _git_checkout():
        pytest.skip("the course is not a git checkout")
    aid = "01_devices"
    committed = course.NOTEBOOKS / aid
    notebook = committed / f"{aid}.ipynb"
    original = notebook.read_bytes()
    fresh = tmp_path / aid
    shutil.copytree(committed, fresh)
    try:
        notebook.write_bytes(original.replace(b"Learning objectives", b"My learning objectives"))
        assert release.release_differences(fresh, committed) == []
        (fresh / notebook.name).write_bytes(original.replace(b"Learning objectives", b"New text"))
        assert release.release_differences(fresh, committed) == [notebook.name]
        (fresh / notebook.name).unlink()
        assert release.release_differences(fresh, committed) == [notebook.name]
    finally:
        notebook.write_bytes(original)


@contextlib.contextmanager
def _student_worked_in(aid: str, nb) -> Iterator[None]:
    """While active, ``notebooks/<aid>/`` holds what a student left there: ``nb`` saved over the
    committed copy, a Lab checkpoint of it and a file of their own; all restored after."""
    folder = course.NOTEBOOKS / aid
    notebook = folder / f"{aid}.ipynb"
    original = notebook.read_bytes()
    written = [folder / ".ipynb_checkpoints", folder / "my_notes.py"]
    assert not any(p.exists() for p in written), f"leftovers of an earlier run: {written}"
    try:
        nbformat.write(nb, notebook)
        (folder / ".ipynb_checkpoints").mkdir()
        shutil.copyfile(notebook, folder / ".ipynb_checkpoints" / f"{aid}-checkpoint.ipynb")
        (folder / "my_notes.py").write_text("x = 1\n")
        yield
    finally:
        notebook.write_bytes(original)
        shutil.rmtree(folder / ".ipynb_checkpoints", ignore_errors=True)
        (folder / "my_notes.py").unlink(missing_ok=True)


def test_a_students_work_in_notebooks_changes_nothing_the_instructor_tools_read(tmp_path):
    """A student answers an exercise in the committed copy (as the README's student command
    had them do), edits a demo cell, saves a checkpoint and a file of their own: the demo's
    blank student still has every stub, its reference and blank go through intake and scan
    unchanged, and the release check still passes (issue 38: the demo graded such a blank
    3/16)."""
    from grader.grading import intake, scan
    from grader.tools import samples

    aid = "12_triton"
    reference = {
        course.nbgrader_meta(c)["grade_id"]: course.strip_solution_markers(c.source)
        for c in course.solution_cells(course.read(course.source_path(aid)))
    }
    nb = course.read(course.NOTEBOOKS / aid / f"{aid}.ipynb")
    answered = course.solution_cells(nb)[0]
    answered.source = reference[course.nbgrader_meta(answered)["grade_id"]]
    demo = next(c for c in nb.cells if c.cell_type == "code" and not course.nbgrader_meta(c))
    demo.source += "\nprint('my own line')"
    with _student_worked_in(aid, nb):
        blank = samples.build_submission(aid, None, blank=True)
        for cell in course.solution_cells(blank):
            assert "raise NotImplementedError()" in cell.source, course.nbgrader_meta(cell)
        assert "my own line" not in nbformat.writes(blank)
        for name, sub in (("blank", blank), ("reference", samples.build_submission(aid, None))):
            path = tmp_path / name / aid / f"{aid}.ipynb"
            path.parent.mkdir(parents=True)
            nbformat.write(sub, path)
            taken = intake.take_in(path.parent, aid)
            assert taken.review == [], (name, taken.review)
            assert scan.scan_notebook(taken.notebook, aid) == [], name
            changed = {label for label, _ in scan.student_cells(taken.notebook, aid)}
            assert changed == set(reference), (name, changed - set(reference))
        if _git_checkout():
            assert pipeline.release([aid], check=True) == []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_demo_and_the_release_check_pass_after_a_student_worked_in_notebooks(tmp_path):
    """A student answers every exercise of 02_async in the committed copy, saves a checkpoint and
    writes a file of their own there; then an instructor runs the demo of that assignment (its
    core class: the blank must still score 0) and the release check: both pass (issue 38)."""
    aid = "02_async"
    from grader.tools import samples

    with _student_worked_in(aid, samples.build_submission(aid, None)):  # every answer written
        demo = subprocess.run(
            [sys.executable, "-m", "grader", "demo", "--assignment", aid, "--class", "core",
             "--jobs", "2", "--no-feedback", "--json", str(tmp_path / "demo.json")],
            cwd=course.REPO, capture_output=True, text=True, timeout=840,
        )  # fmt: skip
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
        rows = json.loads((tmp_path / "demo.json").read_text())["results"]
        blank = next(r for r in rows if r["student"] == "blank")
        assert blank["score"] == 0 and all(r["ok"] for r in rows)
        if _git_checkout():
            assert pipeline.release([aid], check=True) == []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_student_saving_in_the_readmes_jupyterlab_changes_nothing_of_the_course(tmp_path):
    """The README's two commands one after the other: a notebook opened and saved in the
    student's JupyterLab (which writes ``.ipynb_checkpoints/``) and a student's own file land in
    the student's workspace; ``notebooks/`` is left as committed and the release check passes."""
    from .test_browser import jupyterlab

    if not (course.REPO / ".venv" / "bin" / "jupyter").exists():
        pytest.skip("the README's command needs .venv/: create it as the README says")
    aid = "10_profiling"
    folder = course.NOTEBOOKS / aid
    original = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    api = f"/api/contents/notebooks/{aid}"
    with jupyterlab(course.REPO, tmp_path, "jupyterlab-release.log") as server:

        def call(method: str, path: str, body: dict | None = None) -> dict:
            request = urllib.request.Request(
                f"{server['base']}{path}?token={server['token']}",
                method=method,
                data=None if body is None else json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=60) as r:
                return json.loads(r.read() or b"{}")

        # What JupyterLab does when a student opens the notebook and saves it (Ctrl-S).
        model = call("GET", f"{api}/{aid}.ipynb")
        call("POST", f"{api}/{aid}.ipynb/checkpoints")
        model["content"]["cells"][0]["source"] += "\n\nMy note: read twice."
        call("PUT", f"{api}/{aid}.ipynb", {"type": "notebook", "content": model["content"]})
        call("PUT", f"{api}/my_notes.py", {"type": "file", "format": "text", "content": "x=1"})
    mine = server["workspace"] / "notebooks" / aid
    assert (mine / ".ipynb_checkpoints").is_dir(), "JupyterLab wrote no checkpoint"
    assert "My note: read twice." in (mine / f"{aid}.ipynb").read_text()
    assert (mine / "my_notes.py").read_text() == "x=1"
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == original, (
        "the student's Lab wrote into the course's notebooks/"
    )
    assert pipeline.release([aid], check=True) == []


@pytest.mark.parametrize("aid", ASSIGNMENTS)
def test_student_copy_hides_solutions_and_hidden_tests(aid):
    nb = course.read(release.student_copy(aid))
    text = nbformat.writes(nb)
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text
    assert "_hidden(" not in text
    for cell in course.solution_cells(nb):
        assert "raise NotImplementedError()" in cell.source


@pytest.mark.parametrize("aid", ASSIGNMENTS)
def test_student_copy_opens_on_its_title_with_one_line_for_instructors(aid):
    """The source opens with the instructors' banner; the student copy opens on the title and
    keeps one short line for instructors at the end of its first cell."""
    source = course.read(course.source_path(aid)).cells[0].source
    assert source.startswith(release.SOURCE_BANNER)
    first = course.read(release.student_copy(aid)).cells[0].source
    assert first.startswith(f"# {aid[:2]} · "), first.splitlines()[0]
    assert "Course file" not in first and "generated from the instructor" not in first
    assert first.endswith(release.instructor_note(aid))
    assert f"solutions/{aid}/{aid}.ipynb" in first
    body = source.split("\n\n", 1)[1]  # everything after the banner, unchanged
    assert first == f"{body}\n\n{release.instructor_note(aid)}"


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
@pytest.mark.slow  # runs each student copy in a kernel
def test_student_copy_runs_until_the_exercises(aid, tmp_path):
    """Demos run without error in the student copy; only the unsolved exercises' test cells
    fail: "not attempted yet", in one line (no traceback into the course's checks), or a check
    failure for a module-level answer."""
    folder = tmp_path / aid  # a copy: what the cells write never lands in a student's folder
    shutil.copytree(release.student_copy(aid).parent, folder)
    nb = course.read(folder / f"{aid}.ipynb")
    client = NotebookClient(
        nb,
        timeout=600,
        allow_errors=True,
        resources={"metadata": {"path": str(folder)}},
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
