"""Sample submissions: the reference, the blank copy, typical mistakes, other correct answers.

Each file ``grader/samples/<assignment>/<name>.py`` is one answer to one or more
exercises, written in cells marked ``# %% <solution grade id>``, with a docstring that
says what it does and header lines that say which test cells it must fail::

    \"\"\"pick_device returns a str such as "cuda:0" instead of a torch.device.\"\"\"
    # fails: test_pick_device, test_pick_device_cuda
    # %% pick_device
    def pick_device(preferred=None):
        ...

``# fails:`` applies everywhere; ``# fails-on-cpu:`` and ``# fails-on-gpu:`` add cells
that fail only without or only with a CUDA GPU; ``# may-fail-on-gpu:`` names cells whose
outcome on a real GPU depends on timing (a race that may or may not show in one run). A file with no ``fails`` line is a
correct answer written differently from the reference: it must get full marks. On a
machine without a GPU every CUDA-only cell (grade id ending ``_cuda``) fails for
everyone under grading, so it is expected to fail there too.

The samples serve three purposes: tests prove each mistake loses exactly the expected
points and each alternative gets full marks; ``python -m grader demo`` autogrades them
with nbgrader as a class; and instructors can read them as the mistakes to expect.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from grader.grading import judge
from grader.runtime import course

SAMPLES_DIR = course.PACKAGE / "samples"
_CELL_RE = re.compile(r"^# %% (\S+)\s*$", re.MULTILINE)
_FAILS_RE = re.compile(r"^# (fails|fails-on-cpu|fails-on-gpu|may-fail-on-gpu):(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Sample:
    """One sample answer.

    Attributes:
        assignment: Assignment id.
        name: File stem, e.g. ``wrong_pick_device_returns_str``.
        description: The docstring: what this answer does.
        cells: Solution grade id -> code replacing that solution cell.
        fails: Test cells that fail on any machine.
        fails_on_cpu: Extra test cells that fail only without a GPU.
        fails_on_gpu: Extra test cells that fail only with a GPU.
        may_fail_on_gpu: Cells that may fail or pass on a real GPU (a race).
    """

    assignment: str
    name: str
    description: str
    cells: dict[str, str]
    fails: frozenset[str] = frozenset()
    fails_on_cpu: frozenset[str] = frozenset()
    fails_on_gpu: frozenset[str] = frozenset()
    may_fail_on_gpu: frozenset[str] = frozenset()

    @property
    def is_mistake(self) -> bool:
        """True for a wrong answer (some cell must fail somewhere)."""
        return bool(self.fails or self.fails_on_cpu or self.fails_on_gpu)

    def expected_failures(self, gpu: bool) -> set[str]:
        """Test cells this answer fails under grading, on a machine with or without a GPU
        (the CUDA-only cells that every answer fails without a GPU excluded)."""
        return set(self.fails | (self.fails_on_gpu if gpu else self.fails_on_cpu))

    def allowed_failures(self, gpu: bool) -> set[str]:
        """Expected failures plus, on a GPU, the cells whose outcome there depends on timing."""
        return self.expected_failures(gpu) | (set(self.may_fail_on_gpu) if gpu else set())


def parse_sample(path: Path, assignment: str) -> Sample:
    """Read one sample file.

    Raises:
        ValueError: no docstring, no ``# %%`` cell, an unknown solution or test grade id.
    """
    text = Path(path).read_text()
    module = ast.parse(text)
    description = ast.get_docstring(module)
    if not description:
        raise ValueError(f"{path}: a sample starts with a docstring saying what the answer does")
    fails = {"fails": set(), "fails-on-cpu": set(), "fails-on-gpu": set(), "may-fail-on-gpu": set()}
    for kind, ids in _FAILS_RE.findall(text):
        fails[kind].update(i.strip() for i in ids.split(",") if i.strip())
    parts = _CELL_RE.split(text)
    cells = {parts[i]: parts[i + 1].strip("\n") + "\n" for i in range(1, len(parts), 2)}
    if not cells:
        raise ValueError(f"{path}: no '# %% <solution grade id>' cell")
    nb = course.read(course.source_path(assignment))
    solution_ids = {course.nbgrader_meta(c)["grade_id"] for c in course.solution_cells(nb)}
    test_ids = {t.grade_id for t in course.test_cells(nb)}
    unknown = (set(cells) - solution_ids) | (set().union(*fails.values()) - test_ids)
    if unknown:
        raise ValueError(
            f"{path}: unknown grade ids {sorted(unknown)}; solutions: {sorted(solution_ids)}, tests: {sorted(test_ids)}"
        )
    return Sample(
        assignment,
        Path(path).stem,
        description.strip(),
        cells,
        frozenset(fails["fails"]),
        frozenset(fails["fails-on-cpu"]),
        frozenset(fails["fails-on-gpu"]),
        frozenset(fails["may-fail-on-gpu"]),
    )


def load_samples(assignment: str) -> list[Sample]:
    """All samples of an assignment, sorted by name."""
    folder = SAMPLES_DIR / assignment
    return (
        [parse_sample(p, assignment) for p in sorted(folder.glob("*.py"))]
        if folder.is_dir()
        else []
    )


# --------------------------------------------------------------------------- building notebooks
def build_submission(
    assignment: str, overrides: dict[str, str] | None, *, blank: bool = False
) -> nbformat.NotebookNode:
    """A student notebook: the student copy (generated from ``solutions/`` by the release step,
    :func:`grader.grading.release.student_copy`, never read from ``notebooks/``, where a student
    may be working) with solution cells filled in.

    Args:
        assignment: Assignment id.
        overrides: Solution grade id -> code; other solution cells get the reference code.
        blank: Leave the release copy as it is (every exercise unsolved).

    Returns:
        The notebook, ready to be written as a submission.
    """
    from grader.grading.release import student_copy

    nb = course.read(student_copy(assignment))
    if blank:
        return nb
    source = {
        course.nbgrader_meta(c)["grade_id"]: c.source
        for c in course.solution_cells(course.read(course.source_path(assignment)))
    }
    for cell in course.solution_cells(nb):
        grade_id = course.nbgrader_meta(cell)["grade_id"]
        code = (overrides or {}).get(grade_id)
        magic = course.writefile_line(cell.source)
        if code is not None and magic and not code.startswith("%%"):
            code = f"{magic}\n{code}"  # a sample holds the script; the cell writes it
        cell.source = code if code is not None else course.strip_solution_markers(source[grade_id])
    return nb


@dataclass
class Student:
    """A sample student of the demo class: a submission per assignment and what it should score."""

    name: str
    notebooks: dict[str, nbformat.NotebookNode] = field(default_factory=dict)
    expected: dict[str, dict[str, set[str]]] = field(
        default_factory=dict
    )  # aid -> {"cpu"/"gpu"/"gpu_may": cells}
    samples: list[str] = field(default_factory=list)

    def expected_failures(self, assignment: str, gpu: bool) -> set[str]:
        """Test cells expected to score 0 under grading on this kind of machine."""
        fails = set(self.expected[assignment]["gpu" if gpu else "cpu"])
        if not gpu:
            nb = course.read(course.source_path(assignment))
            fails |= {t.grade_id for t in course.test_cells(nb) if t.needs_cuda}
        return fails

    def allowed_failures(self, assignment: str, gpu: bool) -> set[str]:
        """Expected failures plus, on a GPU, cells whose outcome there depends on timing."""
        may = self.expected[assignment].get("gpu_may", set()) if gpu else set()
        return self.expected_failures(assignment, gpu) | may


def _pack(samples: list[Sample]) -> list[list[Sample]]:
    """Group samples so that no group has two answers to the same exercise."""
    groups: list[list[Sample]] = []
    for sample in samples:
        for group in groups:
            if not any(set(sample.cells) & set(other.cells) for other in group):
                group.append(sample)
                break
        else:
            groups.append([sample])
    return groups


def core_samples(samples: list[Sample], gpu: bool = False) -> list[Sample]:
    """One mistake and one correct alternative per exercise: the samples of the core class.

    For each exercise (solution grade id) the first mistake, in file order, that fails a test
    cell on this kind of machine (``gpu``), else the first mistake; and the first correct
    alternative. A sample that answers several exercises counts for each of them.

    Args:
        samples: An assignment's samples (:func:`load_samples`).
        gpu: Whether the grading machine has a CUDA GPU.

    Returns:
        The chosen samples, in file order, without repeats.
    """
    chosen: list[Sample] = []
    mistakes = [s for s in samples if s.is_mistake]
    exercises = list(dict.fromkeys(cell for s in samples for cell in s.cells))
    for exercise in exercises:
        answers = [s for s in mistakes if exercise in s.cells]
        visible = [s for s in answers if s.expected_failures(gpu)]
        for pick in (visible or answers)[:1] + [
            s for s in samples if not s.is_mistake and exercise in s.cells
        ][:1]:
            if pick not in chosen:
                chosen.append(pick)
    return [s for s in samples if s in chosen]


#: The sample classes ``python -m grader demo --class`` grades: ``full``, every sample of every
#: assignment; ``core``, per assignment the reference, the blank copy and one mistake and one
#: correct alternative per exercise (:func:`core_samples`), what the default test command grades.
CLASSES = ("full", "core")


def demo_class(
    assignments: list[str] | None = None, kind: str = "full", gpu: bool = False
) -> list[Student]:
    """The sample class: ``reference``, ``blank``, ``mistakes_N`` and ``alternative_N``.

    Mistakes are packed so that each ``mistakes_N`` student makes at most one mistake per
    exercise (and each mistake's effect stays visible); the same for correct
    alternatives. This keeps the number of nbgrader runs small.

    Args:
        assignments: Assignments to include (default: all).
        kind: ``"full"`` (every sample) or ``"core"`` (:func:`core_samples`).
        gpu: Whether the grading machine has a CUDA GPU (which mistakes ``core`` picks).

    Raises:
        ValueError: ``kind`` is not one of :data:`CLASSES`.
    """
    if kind not in CLASSES:
        raise ValueError(f"unknown sample class {kind!r}: choose one of {', '.join(CLASSES)}")
    assignments = assignments or course.assignments()
    students: dict[str, Student] = {}

    def student(name: str) -> Student:
        return students.setdefault(name, Student(name))

    for aid in assignments:
        all_tests = {t.grade_id for t in course.test_cells(course.read(course.source_path(aid)))}
        ref = student("reference")
        ref.notebooks[aid] = build_submission(aid, None)
        ref.expected[aid] = {"cpu": set(), "gpu": set()}
        blank = student("blank")
        blank.notebooks[aid] = build_submission(aid, None, blank=True)
        blank.expected[aid] = {"cpu": set(all_tests), "gpu": set(all_tests)}
        samples = load_samples(aid)
        if kind == "core":
            samples = core_samples(samples, gpu)
        for prefix, chosen in (
            ("mistakes", [s for s in samples if s.is_mistake]),
            ("alternative", [s for s in samples if not s.is_mistake]),
        ):
            for i, group in enumerate(_pack(chosen), start=1):
                st = student(f"{prefix}_{i}")
                overrides = {k: v for s in group for k, v in s.cells.items()}
                st.notebooks[aid] = build_submission(aid, overrides)
                st.expected[aid] = {
                    "cpu": set().union(*(s.expected_failures(gpu=False) for s in group)),
                    "gpu": set().union(*(s.expected_failures(gpu=True) for s in group)),
                    "gpu_may": set().union(*(s.may_fail_on_gpu for s in group)),
                }
                st.samples.extend(f"{aid}/{s.name}" for s in group)
    return list(students.values())


def write_class(students: list[Student], submitted: Path) -> None:
    """Write the class as ``submitted/<student>/<assignment>/<assignment>.ipynb``."""
    for st in students:
        for aid, nb in st.notebooks.items():
            out = Path(submitted) / st.name / aid
            out.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, str(out / f"{aid}.ipynb"))


# --------------------------------------------------------------------------- quick in-process grading
#: Grading in this process (moved to the grading layer, where the class run's cache seeding
#: uses it too): kept under their old names for the tools and tests.
_judge_here = judge.judge_here
run_test_cells = judge.run_test_cells
