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
from dataclasses import dataclass, field
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
    assignment: str = ""
    #: mean seconds per submission in each phase (grader.grading.report.PHASES), and "class"
    #: for the command's own work per submission (the wall time no submission accounts for)
    phases: dict[str, float] = field(default_factory=dict)


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
            rows.append(
                Run(students, n, wall, wall / students, base / wall, ok,
                    assignment=assignment, phases=mean_phases(results, wall, n))
            )  # fmt: skip
        if ray_nodes:
            rows.append(
                _ray_run(assignment, students, submitted, Path(tmp), ray_nodes, rows, options)
            )
    return rows


def mean_phases(results: list, wall_s: float, jobs: int) -> dict[str, float]:
    """Mean seconds per submission in each phase of ``results`` (their ``phases``), and
    ``"class"``: what the command spent beyond the submissions' own time (its start, the
    class's seed and templates, writing the gradebook), per submission."""
    if not results:
        return {}
    phases: dict[str, float] = {}
    for r in results:
        for phase, seconds in (r.phases or {}).items():
            phases[phase] = phases.get(phase, 0.0) + seconds / len(results)
    own = sum(r.seconds + (r.phases or {}).get("start", 0.0) for r in results)
    phases["class"] = max(0.0, wall_s * jobs - own) / len(results)
    return {k: round(v, 2) for k, v in phases.items()}


def run_all(assignments: list[str], students: int, jobs: list[int], **options) -> list[Run]:
    """:func:`run` for each assignment in turn (no Ray run); the rows of all of them."""
    rows: list[Run] = []
    for assignment in assignments:
        rows += run(assignment, students, jobs, **options)
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
    return Run(
        students, nodes, wall, wall / students, base / wall, ok, engine="ray",
        assignment=assignment, phases=mean_phases(results, wall, nodes),
    )  # fmt: skip


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


def _machine() -> str:
    import torch

    return (
        f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}), "
        f"{'a CUDA GPU' if torch.cuda.is_available() else 'no GPU'}, torch {torch.__version__}"
    )


def format_table(rows: list[Run]) -> str:
    """A Markdown table, one row per assignment: seconds per submission at each ``--jobs``
    value (the class's wall time over its size), and where one submission's time went at the
    first ``--jobs`` value (mean seconds per phase, :data:`grader.grading.report.PHASES`)."""
    from grader.grading.report import PHASES

    by_aid: dict[str, list[Run]] = {}
    for r in rows:
        if r.engine == "local":
            by_aid.setdefault(r.assignment, []).append(r)
    jobs = sorted({r.jobs for rs in by_aid.values() for r in rs})
    shown = [p for p in PHASES if p != "start"] + ["class"]
    head = (
        ["assignment"]
        + [f"s per submission, {j} at a time" for j in jobs]
        + [f"{p} (s)" for p in shown]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for aid, runs in by_aid.items():
        per = {r.jobs: r for r in runs}
        first = runs[0]
        cells = [aid] + [
            (f"{per[j].per_student_s:.1f}" + ("" if per[j].ok else " (not all graded)"))
            if j in per
            else ""
            for j in jobs
        ]
        phases = dict(first.phases)
        phases["kernel start"] = phases.get("kernel start", 0.0) + phases.get("start", 0.0)
        cells += [f"{phases.get(p, 0.0):.1f}" for p in shown]
        lines.append("| " + " | ".join(cells) + " |")
    students = rows[0].students if rows else 0
    for j in jobs:
        values = sorted(r.per_student_s for rs in by_aid.values() for r in rs if r.jobs == j)
        if values:
            mid = len(values) // 2
            median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
            lines.append(
                f"\nMedian at {j} at a time: {median:.1f} s per submission; slowest "
                f"{values[-1]:.1f} s."
            )
    lines.append(
        f"\n{students} submissions per assignment (the reference, the correct alternatives and "
        f"the mistakes of grader/samples, cycled), graded with the sandbox on; {_machine()}; "
        f"{date.today().isoformat()}. The phases are one submission's mean at {jobs[0] if jobs else 1} "
        "at a time (kernel start includes the grading process's own start); class is the "
        "command's own work per submission (its start, the class's compile-cache seed and "
        "templates, the gradebook)."
    )
    return "\n".join(lines)


#: The markers around the table :func:`write_readme` replaces.
README_BEGIN = "<!-- benchmark-table: python -m grader benchmark --assignment all --readme -->"
README_END = "<!-- /benchmark-table -->"


def write_readme(rows: list[Run], readme: Path) -> Path:
    """Replace the text between :data:`README_BEGIN` and :data:`README_END` in ``readme``
    with :func:`format_table` of ``rows``.

    Raises:
        ValueError: the markers are not both in the file, in that order.
    """
    text = Path(readme).read_text()
    start, end = text.find(README_BEGIN), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(
            f"{readme} has no {README_BEGIN!r} ... {README_END!r} block: add the two lines "
            "where the table goes"
        )
    body = text[: start + len(README_BEGIN)] + "\n" + format_table(rows) + "\n" + text[end:]
    Path(readme).write_text(body)
    return Path(readme)


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
