"""Benchmark of the grading command: time per student and for a class, serial vs parallel.

``python -m grader benchmark --students 50 --jobs 1 2`` builds a class of sample students for
one assignment (the reference, the correct alternatives and the packed mistakes of
``grader/samples``, cycled to the class size), grades it once per ``--jobs`` value with the
course's autograde in a fresh working folder each time, and prints one row per run: wall time
(s), seconds per student, and the speed-up over the first run, measured in the same session.
With ``--json`` it also writes the rows. This is a benchmark, not a test: the figures depend on
the machine; the README quotes one run with its machine.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import nbformat

from . import course, grading, samples


@dataclass
class Run:
    """One grading of the whole class."""

    students: int
    jobs: int
    wall_s: float
    per_student_s: float
    speedup: float
    ok: bool


def build_class(assignment: str, students: int, folder: Path) -> None:
    """Write ``students`` submissions of ``assignment`` under ``folder/<student>/<assignment>/``.

    Raises:
        ValueError: ``students`` is below 1.
    """
    if students < 1:
        raise ValueError(f"students must be at least 1, got {students}")
    pool = [st for st in samples.demo_class([assignment]) if st.name != "blank"]
    for i in range(students):
        model = pool[i % len(pool)]
        out = folder / f"student_{i:03d}" / assignment
        out.mkdir(parents=True)
        nbformat.write(model.notebooks[assignment], str(out / f"{assignment}.ipynb"))


def run(assignment: str, students: int, jobs: list[int], **options) -> list[Run]:
    """Grade the same class once per entry of ``jobs``; the first entry is the baseline.

    Args:
        assignment: Assignment id (03_streams grades in about 6 s a notebook on 2 cores).
        students: Class size.
        jobs: Submissions graded at the same time, one run each (e.g. ``[1, 2]``).
        **options: More :class:`grader.grading.GradingOptions` fields.

    Returns:
        One :class:`Run` per entry of ``jobs``.
    """
    from .pipeline import autograde

    course.check_assignment(assignment)
    rows: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        submitted = Path(tmp) / "submitted"
        build_class(assignment, students, submitted)
        for n in jobs:
            work = Path(tmp) / f"work-{n}"
            opts = grading.GradingOptions.for_machine(n, cpu_ok=True, **options)
            start = time.perf_counter()
            results = autograde(submitted, work=work, assignment_ids=[assignment], options=opts)
            wall = time.perf_counter() - start
            ok = len(results) == students and all(r.status == "graded" for r in results)
            base = rows[0].wall_s if rows else wall
            rows.append(Run(students, n, wall, wall / students, base / wall, ok))
    return rows


def format_rows(rows: list[Run], assignment: str) -> str:
    """A Markdown table of the runs, with the machine."""
    lines = [
        f"Grading {rows[0].students} submissions of {assignment} on {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}), {date.today().isoformat()}:",
        "",
        "| jobs | wall time (s) | s per student | speed-up vs first row | all graded |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.jobs} | {r.wall_s:.0f} | {r.per_student_s:.1f} | {r.speedup:.2f}x | "
            f"{'yes' if r.ok else 'NO'} |"
        )
    return "\n".join(lines)


def write_json(rows: list[Run], assignment: str, path: Path) -> Path:
    """Save the runs with the machine and date."""
    import torch

    data = {
        "assignment": assignment,
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "date": date.today().isoformat(),
        "runs": [r.__dict__ for r in rows],
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n")
    return Path(path)
