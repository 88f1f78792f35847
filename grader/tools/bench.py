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

from grader.grading import grading
from grader.runtime import course
from grader.tools import samples


@dataclass
class Run:
    """One grading of the whole class."""

    students: int
    jobs: int
    wall_s: float
    per_student_s: float
    speedup: float
    ok: bool
    engine: str = "local"


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


def run(
    assignment: str, students: int, jobs: list[int], *, ray_nodes: int = 0, **options
) -> list[Run]:
    """Grade the same class once per entry of ``jobs`` (and once on a local Ray cluster of
    ``ray_nodes`` one-CPU node processes when it is above 0); the first run is the baseline.

    Args:
        assignment: Assignment id (03_streams grades in about 6 s a notebook on 2 cores).
        students: Class size.
        jobs: Submissions graded at the same time, one run each (e.g. ``[1, 2]``).
        ray_nodes: Node processes of the local Ray cluster (0: no Ray run).
        **options: More :class:`grader.grading.grading.GradingOptions` fields.

    Returns:
        One :class:`Run` per grading.
    """
    from grader.grading.pipeline import autograde

    course.check_assignment(assignment)
    rows: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        submitted = Path(tmp) / "submitted"
        build_class(assignment, students, submitted)
        for n in jobs:
            work = Path(tmp) / f"work-{n}"
            opts = grading.GradingOptions.for_machine(n, cpu_ok=True, **options)
            start = time.perf_counter()
            results = autograde(
                submitted, work=work, assignment_ids=[assignment], options=opts,
                allow_root_unsandboxed=True,  # the course's own samples, not students' code
            )  # fmt: skip
            wall = time.perf_counter() - start
            ok = len(results) == students and all(r.status == "graded" for r in results)
            base = rows[0].wall_s if rows else wall
            rows.append(Run(students, n, wall, wall / students, base / wall, ok))
        if ray_nodes:
            rows.append(
                _ray_run(assignment, students, submitted, Path(tmp), ray_nodes, rows, options)
            )
    return rows


def _ray_run(assignment, students, submitted, tmp, nodes, rows, options) -> Run:
    """One grading through the Ray engine on a local cluster: a head and ``nodes - 1`` more
    node processes, one CPU each."""
    import ray
    from ray.cluster_utils import Cluster

    from grader.grading.pipeline import autograde
    from grader.grading.ray_engine import RayEngine

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        opts = grading.GradingOptions.for_machine(1, cpu_ok=True, **options)
        start = time.perf_counter()
        results = autograde(
            submitted, work=tmp / "work-ray", assignment_ids=[assignment], options=opts,
            engine=RayEngine(cluster.address), allow_root_unsandboxed=True,
        )  # fmt: skip
        wall = time.perf_counter() - start
    finally:
        ray.shutdown()
        cluster.shutdown()
    ok = len(results) == students and all(r.status == "graded" for r in results)
    base = rows[0].wall_s if rows else wall
    return Run(students, nodes, wall, wall / students, base / wall, ok, engine="ray")


def format_rows(rows: list[Run], assignment: str) -> str:
    """A Markdown table of the runs, with the machine."""
    lines = [
        f"Grading {rows[0].students} submissions of {assignment} on {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}), {date.today().isoformat()}:",
        "",
        "| engine | jobs / nodes | wall time (s) | s per student | speed-up vs first row | all graded |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        how = f"{r.jobs} at a time" if r.engine == "local" else f"{r.jobs} node processes"
        lines.append(
            f"| {r.engine} | {how} | {r.wall_s:.0f} | {r.per_student_s:.1f} | {r.speedup:.2f}x | "
            f"{'yes' if r.ok else 'NO'} |"
        )
    lines += ["", extrapolate(rows)]
    return "\n".join(lines)


def extrapolate(rows: list[Run], students: int = 5000, notebooks: int = 11) -> str:
    """What the measured cost per submission means for a large class (a written estimate, not
    a measurement): core-seconds per notebook from the one-at-a-time run, then wall time on
    nodes of this machine's size grading one submission per two cores."""
    serial = next((r for r in rows if r.engine == "local" and r.jobs == 1), rows[0])
    # without a one-at-a-time run: the first run's time per submission times its jobs
    one_s = serial.per_student_s * (serial.jobs if serial.engine == "local" else 1)
    how = "" if serial.jobs == 1 else f" (from the run with {serial.jobs} at a time)"
    cores = os.cpu_count() or 1
    core_s = one_s * 2  # one submission keeps about two cores busy (job + kernel)
    total_h = students * notebooks * one_s / 3600
    per_node = max(1, cores // 2)
    lines = [
        f"Extrapolation (not measured): {one_s:.1f} s per submission one at a time here{how}, "
        f"about {core_s:.0f} core-seconds each. {students:,} students x {notebooks} notebooks "
        f"= {students * notebooks:,} submissions: {total_h:.0f} h one at a time"
    ]
    for nodes in (1, 10, 50):
        hours = total_h / (nodes * per_node)
        lines.append(
            f"; on {nodes} node(s) like this one ({per_node} at a time each) about {hours:.1f} h"
        )
    lines.append(". Notebooks with long CUDA or compile checks cost more; measure one class first.")
    return "".join(lines)


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
