"""What happened to each submission (:class:`Result`) and the grading report built from it."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from grader.grading import sandbox


@dataclass
class Result:
    """What happened to one submission.

    ``status`` is ``"graded"``, ``"missing"`` (no notebook), ``"unchanged"`` (graded earlier
    with the same content; scores from then) or ``"failed"`` (the grading itself failed: not
    written to the gradebook, retried on the next run).
    """

    student: str
    assignment: str
    status: str
    score: float = 0.0
    max_score: float = 0.0
    cells: dict[str, float] = field(default_factory=dict)  # grade id -> score
    failed_cells: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    review: list[str] = field(default_factory=list)
    seconds: float = 0.0
    digest: str = ""
    isolation: str = ""
    deferred: list[str] = field(default_factory=list)  # test cells left to another machine
    timestamp: str = ""  # the submission's timestamp (nbgrader's timestamp.txt), or ""
    phases: dict[str, float] = field(default_factory=dict)  # where the seconds went (PHASES)
    check_seconds: dict[str, float] = field(default_factory=dict)  # test cell's grade id -> s

    @property
    def flagged(self) -> bool:
        """True when a person should look at the submission before trusting its score."""
        return bool(self.review)


#: The phases of one submission's grading that :class:`Stopwatch` times (s), in order:
#: ``start`` the grading process's start (the fork, until the job runs); ``intake`` taking the
#: notebook in and scanning its code; ``setup`` the private course, user, control groups and
#: sandbox files; ``nbgrader`` nbgrader's own work (its database, the converters), which is what
#: ``autograde`` took beyond the kernels; ``kernel start`` starting the sandboxed kernels until
#: they answer (a fresh Python, ipykernel and the guard); ``cells`` the notebook's own cells in
#: the kernel (the student's code and the demos, the first import of torch included);
#: ``checks`` the test cells, judged in the grading process with requests to the kernel;
#: ``report`` reading the scores, outputs and audit log back.
PHASES = ("start", "intake", "setup", "nbgrader", "kernel start", "cells", "checks", "report")


class Stopwatch:
    """Seconds per phase of one grading process (see :data:`PHASES`); one per process."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.checks: dict[str, float] = {}  # a judged test cell's grade id -> s

    def add(self, phase: str, seconds: float) -> None:
        """Count ``seconds`` more against ``phase``.

        Raises:
            ValueError: ``phase`` is not one of :data:`PHASES`.
        """
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}: one of {', '.join(PHASES)}")
        self.seconds[phase] = self.seconds.get(phase, 0.0) + max(0.0, seconds)

    @contextmanager
    def timing(self, phase: str, check: str | None = None):
        """Time the ``with`` block against ``phase`` (and, for a test cell, as ``check``: its
        grade id, in :attr:`checks`)."""
        began = time.monotonic()
        try:
            yield
        finally:
            self.add(phase, time.monotonic() - began)
            if check is not None:
                self.checks[check] = round(time.monotonic() - began, 2)

    def total(self, *phases: str) -> float:
        """Seconds counted so far against ``phases``, together."""
        return sum(self.seconds.get(p, 0.0) for p in phases)

    def rounded(self) -> dict[str, float]:
        """The phases timed so far, in :data:`PHASES` order, to 0.01 s."""
        return {p: round(self.seconds[p], 2) for p in PHASES if p in self.seconds}


#: This process's stopwatch (a grading process grades one submission).
STOPWATCH = Stopwatch()


def shown(name: str) -> str:
    """A student or folder name as the report prints it (control characters escaped)."""
    return name if name.isprintable() else repr(name)


def format_summary(results: list[Result]) -> str:
    """One line per submission: score, status, what happened, and why to review."""
    lines = [f"{'student':<18} {'assignment':<18} {'score':>9}  {'status':<10} notes"]
    for r in results:
        score = (
            f"{r.score:g}/{r.max_score:g}"
            if r.status in ("graded", "unchanged", "missing")
            else "-"
        )
        notes = list(r.notes)
        if r.deferred:
            notes.append(f"graded on another machine: {', '.join(r.deferred)}")
        if r.not_checked:
            notes.append(f"not checked (needs a GPU): {', '.join(r.not_checked)}")
        status = r.status + (" REVIEW" if r.flagged else "")
        lines.append(
            f"{shown(r.student):<18} {r.assignment:<18} {score:>9}  {status:<10} {'; '.join(notes)}"
        )
        for reason in r.review:
            lines.append(f"{'':<48} review: {reason}")
    flagged = sum(r.flagged for r in results)
    failed = sum(r.status == "failed" for r in results)
    lines.append(
        f"\n{len(results)} submissions: {sum(r.status in ('graded', 'unchanged') for r in results)} "
        f"graded, {sum(r.status == 'missing' for r in results)} missing, {failed} could not be "
        f"graded (rerun to retry), {flagged} flagged for review (their scores are in the "
        "gradebook, marked as needing manual grading)."
    )
    if results:
        lines.append(f"Kernels: {results[0].isolation or sandbox.isolation_label()}.")
    return "\n".join(lines)


def write_report_csv(results: list[Result], path: Path) -> Path:
    """The grading report as CSV: one row per submission (status, score, notes, review)."""
    import csv

    path = Path(path)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                "student",
                "assignment",
                "status",
                "score",
                "max_score",
                "review",
                "failed_cells",
                "notes",
                "review_reasons",
                "seconds",
            ]  # fmt: skip
        )
        for r in results:
            writer.writerow(
                [
                    r.student,
                    r.assignment,
                    r.status,
                    r.score,
                    r.max_score,
                    "yes" if r.flagged else "",
                    " ".join(r.failed_cells),
                    " | ".join(r.notes),
                    " | ".join(r.review),
                    r.seconds,
                ]  # fmt: skip
            )
    return path


def not_checked_cells(nb) -> list[str]:
    """Grade ids of cells that raised NotCheckedWithoutCuda (CUDA checks on a CPU)."""
    from grader.runtime import course

    out = []
    for cell in nb.cells:
        meta = course.nbgrader_meta(cell)
        if cell.cell_type == "code" and meta.get("grade"):
            if any(o.get("ename") == "NotCheckedWithoutCuda" for o in cell.get("outputs", [])):
                out.append(meta["grade_id"])
    return out
