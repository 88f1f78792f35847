"""``python -m grader demo``: the whole instructor flow on a bundled sample class.

Steps, all in a temporary working folder (the instructor's ``grader/work`` is not
touched): register the assignments in a fresh gradebook, "collect" the sample
submissions of :func:`grader.tools.samples.demo_class` (the reference, the blank student copy,
students with typical mistakes, students with correct answers written differently),
autograde them with nbgrader, generate feedback, export grades to CSV, and print a
student × assignment table. Each cell of the table is checked against what that
sample must score; any difference makes the command exit 1.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from grader.grading import grading, pipeline
from grader.runtime import course
from grader.tools import samples


@dataclass
class DemoResult:
    """One (student, assignment) cell of the demo table."""

    student: str
    assignment: str
    score: float
    max_score: float
    failed_cells: list[str]
    expected_failed_cells: list[str]
    not_checked: list[str]
    status: str
    may_fail_cells: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the cell scored exactly what its sample must score."""
        failed, expected = set(self.failed_cells), set(self.expected_failed_cells)
        return self.status == "graded" and expected <= failed <= expected | set(self.may_fail_cells)


def run_demo(
    assignment_ids: list[str] | None = None,
    *,
    keep: Path | None = None,
    feedback: bool = True,
    progress: bool = True,
    options: grading.GradingOptions | None = None,
    kind: str = "full",
) -> list[DemoResult]:
    """Run the instructor flow on the sample class and compare every score with its expectation.

    Args:
        assignment_ids: Assignments to include (default: all).
        keep: Use this folder as the working folder and keep it (default: a temporary one).
        feedback: Also generate the HTML feedback.
        progress: Show progress bars.
        options: How to grade (default: this machine's defaults; CUDA-only cells accepted
            as 0 without a GPU).
        kind: Which sample class (:data:`grader.tools.samples.CLASSES`): ``"full"``, every
            sample; ``"core"``, one mistake and one alternative per exercise.

    Returns:
        One :class:`DemoResult` per student and assignment.
    """
    ids = [course.check_assignment(a) for a in (assignment_ids or course.assignments())]
    gpu = torch.cuda.is_available()
    tmp = None
    if keep is None:
        tmp = tempfile.mkdtemp(prefix="grader-demo-")
        work = Path(tmp)
    else:
        work = Path(keep).resolve()
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
    try:
        students = samples.demo_class(ids, kind, gpu)
        samples.write_class(students, work / "submitted")
        outcomes = pipeline.autograde(
            work / "submitted",
            work=work,
            assignment_ids=ids,
            options=options,
            cpu_ok=True,
            progress=progress,
            allow_root_unsandboxed=True,  # the course's own samples, not students' code
        )
        if feedback:
            pipeline.feedback(work, progress=progress)
        pipeline.export_csv(work / "grades.csv", work)
        by_name = {st.name: st for st in students}
        results = []
        for o in outcomes:
            student = by_name[o.student]
            expected = sorted(student.expected_failures(o.assignment, gpu))
            may = sorted(student.allowed_failures(o.assignment, gpu) - set(expected))
            results.append(
                DemoResult(
                    o.student,
                    o.assignment,
                    o.score,
                    o.max_score,
                    o.failed_cells,
                    expected,
                    o.not_checked,
                    o.status,
                    may,
                )
            )
        return results
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def format_table(results: list[DemoResult]) -> str:
    """Student × assignment scores; a cell that differs from its expectation is marked."""
    assignments = sorted({r.assignment for r in results})
    students = list(dict.fromkeys(r.student for r in results))
    cell = {(r.student, r.assignment): r for r in results}
    width = max(14, *(len(a) + 2 for a in assignments))
    lines = [f"{'student':<16}" + "".join(f"{a:>{width}}" for a in assignments) + "   as expected?"]
    for s in students:
        row, ok = f"{s:<16}", True
        for a in assignments:
            r = cell.get((s, a))
            if r is None:
                row += f"{'-':>{width}}"
                continue
            mark = "" if r.ok else " !"
            ok &= r.ok
            text = f"{r.score:g}/{r.max_score:g}{mark}" if r.status == "graded" else r.status
            row += f"{text:>{width}}"
        lines.append(row + ("   yes" if ok else "   NO"))
    return "\n".join(lines)


def explain_mismatches(results: list[DemoResult]) -> str:
    """What differed, per cell, for the cells not as expected."""
    lines = []
    for r in results:
        if not r.ok:
            extra = sorted(
                set(r.failed_cells) - set(r.expected_failed_cells) - set(r.may_fail_cells)
            )
            missing = sorted(set(r.expected_failed_cells) - set(r.failed_cells))
            lines.append(
                f"{r.student}/{r.assignment}: status {r.status}; failed but should pass: {extra or 'none'}; "
                f"passed but should fail: {missing or 'none'}"
            )
    return "\n".join(lines)


def write_json(results: list[DemoResult], path: Path) -> None:
    """Write the results (one object per cell, with ``ok``) as JSON."""
    payload = [dict(asdict(r), ok=r.ok) for r in results]
    Path(path).write_text(
        json.dumps({"gpu": torch.cuda.is_available(), "results": payload}, indent=2)
    )
