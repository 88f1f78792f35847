"""Prove the course on a GPU within a lent machine's budget: ``python -m grader verify-gpu``.

A developer lent a GPU has about 30 minutes of it, at most 10 per command, and the machine
goes back after 30 s idle. The verification is therefore three commands of under 9 minutes
each, issued back to back, each writing its log and a summary into ``--out`` (default
``verify-gpu/``):

``--part 1``  a **preflight** (GPU, driver, torch and CUDA versions, a C compiler and
              ``Python.h`` for Triton and Inductor, the packages grading needs), the **CUDA
              tests** (``pytest -m cuda``) and ``python -m grader measure``, which writes
              ``images/recorded_figures.json`` and ``images/measured/``;
``--part 2``  the **demo autograde on CUDA** of the first half of the notebooks: the
              reference, the blank copy and every sample answer, with what each sample scored
              against what it declares;
``--part 3``  the same for the other half.

Each part writes ``part<N>.json`` (machine-readable) and ``part<N>.md`` (for a closing note):
per step, passed or failed, and per check or sample what happened. Without a GPU the command
still runs the preflight and says what it could not do.

:func:`preflight` is also what ``python -m grader autograde`` consults before grading
notebooks that compile (09_compilation): without a compiler, say so before grading, not
inside a failing check.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path

from . import course

#: Assignments whose checks compile code (torch.compile: a C compiler, and Python.h for Triton).
COMPILING = {"09_compilation"}


@dataclass
class Check:
    """One preflight item."""

    name: str
    ok: bool
    detail: str


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), os.environ.get("CC"), "g++", "c++", "gcc", "cc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def preflight() -> list[Check]:
    """What grading and the course's GPU checks need on this machine.

    Returns:
        One :class:`Check` per item: CUDA GPU, torch/CUDA versions, C compiler, ``Python.h``,
        Triton (on a GPU), and the packages the grading side imports.
    """
    import torch

    checks = []
    gpu = torch.cuda.is_available()
    checks.append(
        Check(
            "CUDA GPU",
            gpu,
            f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
            if gpu
            else "none: CUDA cells cannot be checked here",
        )
    )
    checks.append(Check("torch", True, f"{torch.__version__}, CUDA {torch.version.cuda or '-'}"))
    compiler = _compiler()
    checks.append(
        Check(
            "C compiler",
            compiler is not None,
            compiler or "none found (torch.compile / Inductor needs gcc or clang at run time)",
        )
    )
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    checks.append(
        Check(
            "Python.h",
            include.is_file(),
            str(include) if include.is_file() else f"missing at {include} (install python3-dev)",
        )
    )
    if gpu:
        try:
            triton = importlib.import_module("triton")
            checks.append(Check("triton", True, triton.__version__))
        except ImportError as exc:
            checks.append(Check("triton", False, f"not importable: {exc}"))
    for package in ("nbgrader", "nbclient", "ipykernel", "nbformat", "jupyter_client"):
        try:
            module = importlib.import_module(package)
            checks.append(Check(package, True, getattr(module, "__version__", "?")))
        except ImportError as exc:
            checks.append(Check(package, False, f"not importable: {exc}"))
    checks.append(
        Check(
            "bubblewrap",
            shutil.which("bwrap") is not None,
            shutil.which("bwrap") or "absent: kernels not sandboxed",
        )
    )
    return checks


def compile_problems(assignment_ids) -> list[str]:
    """Why notebooks that compile would fail their checks here (empty when nothing is missing)."""
    if not set(assignment_ids) & COMPILING:
        return []
    return [
        f"{c.name}: {c.detail}"
        for c in preflight()
        if c.name in ("C compiler", "Python.h") and not c.ok
    ]


@dataclass
class Step:
    """One step of a part: a command, its outcome and its log file."""

    name: str
    command: list[str]
    ok: bool = False
    seconds: float = 0.0
    log: str = ""
    summary: dict = field(default_factory=dict)


def _run(step: Step, out: Path, timeout: int) -> Step:
    log = out / f"{step.name}.log"
    start = time.monotonic()
    with log.open("w") as f:
        try:
            proc = subprocess.run(
                step.command, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, cwd=course.REPO
            )
            step.ok = proc.returncode == 0
        except subprocess.TimeoutExpired:
            f.write(f"\n[verify-gpu] stopped after {timeout} s\n")
    step.seconds = round(time.monotonic() - start, 1)
    step.log = str(log)
    return step


def _pytest_summary(log: Path) -> dict:
    """The last summary line of a pytest log and its failed tests."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    lines = text.splitlines()
    summary = next(
        (
            line
            for line in reversed(lines)
            if " in " in line
            and any(w in line for w in ("passed", "failed", "skipped", "deselected", "error"))
        ),
        "",
    )
    return {
        "summary": summary.strip("= "),
        "failed": [line for line in lines if line.startswith("FAILED")],
    }


def _demo_summary(path: Path) -> dict:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    rows = []
    for r in data["results"]:
        rows.append(
            {
                "student": r["student"],
                "assignment": r["assignment"],
                "score": f"{r['score']:g}/{r['max_score']:g}",
                "ok": r["ok"],
                "failed": r["failed_cells"],
                "declared": r["expected_failed_cells"],
            }
        )
    return {"all_as_declared": all(r["ok"] for r in rows), "rows": rows}


def demo_assignments(part: int) -> list[str]:
    """The assignments graded by demo part 2 or 3."""
    ids = course.assignments()
    half = (len(ids) + 1) // 2
    return ids[:half] if part == 2 else ids[half:]


def run_part(part: int, out: Path, *, budget_s: int = 530) -> dict:
    """Run one part; write ``part<N>.json`` and ``part<N>.md`` into ``out``; return the summary.

    Raises:
        ValueError: ``part`` is not 1, 2 or 3.
    """
    if part not in (1, 2, 3):
        raise ValueError(f"--part must be 1, 2 or 3, not {part}")
    import torch

    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    result: dict = {
        "part": part,
        "date": date.today().isoformat(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA GPU",
        "preflight": [asdict(c) for c in preflight()],
        "steps": [],
    }
    python = sys.executable
    if part == 1:
        tests = Step(
            "pytest-cuda",
            [
                python,
                "-m",
                "pytest",
                "-m",
                "cuda",
                "-q",
                "-p",
                "no:randomly",
                "-o",
                "addopts=-ra",
                "tests",
            ],
        )
        _run(tests, out, timeout=max(60, budget_s // 2))
        tests.summary = _pytest_summary(Path(tests.log))
        result["steps"].append(asdict(tests))
        left = budget_s - int(time.monotonic() - started)
        measure = Step("measure", [python, "-m", "grader", "measure"])
        if torch.cuda.is_available() and left > 60:
            _run(measure, out, timeout=left - 10)
        else:
            measure.summary = {
                "skipped": "no CUDA GPU" if not torch.cuda.is_available() else "no time left"
            }
        result["steps"].append(asdict(measure))
    else:
        ids = demo_assignments(part)
        demo_json = out / f"demo-part{part}.json"
        demo = Step(
            f"demo-part{part}",
            [python, "-m", "grader", "demo", "--no-feedback", "--json", str(demo_json),
             *(x for a in ids for x in ("--assignment", a))],
        )  # fmt: skip
        _run(demo, out, timeout=budget_s)
        demo.summary = _demo_summary(demo_json)
        result["steps"].append(asdict(demo))
    result["seconds"] = round(time.monotonic() - started, 1)
    result["ok"] = all(s["ok"] for s in result["steps"] if not s["summary"].get("skipped"))
    (out / f"part{part}.json").write_text(json.dumps(result, indent=1))
    (out / f"part{part}.md").write_text(format_markdown(result))
    return result


def _outcome(step: dict) -> str:
    if step["summary"].get("skipped"):
        return "skipped"
    return "passed" if step["ok"] else "FAILED"


def format_markdown(result: dict) -> str:
    """A part's summary as Markdown (for the closing note of the session that ran it)."""
    lines = [
        f"# verify-gpu part {result['part']}: {'passed' if result['ok'] else 'FAILED'}",
        f"{result['device']}; torch {result['torch']}, CUDA {result['cuda']}; {result['date']}; "
        f"{result['seconds']:.0f} s",
        "",
        "## Preflight",
        *(
            f"- {'ok' if c['ok'] else 'MISSING'} {c['name']}: {c['detail']}"
            for c in result["preflight"]
        ),
    ]
    for step in result["steps"]:
        lines += [
            "",
            f"## {step['name']}: {_outcome(step)} ({step['seconds']:.0f} s)",
        ]
        summary = step["summary"]
        if "summary" in summary:
            lines.append(summary["summary"])
            lines += [f"- {line}" for line in summary.get("failed", [])]
        if "rows" in summary:
            lines.append("| student | assignment | score | as declared | failed | declared |")
            lines.append("|---|---|---|---|---|---|")
            for r in summary["rows"]:
                lines.append(
                    f"| {r['student']} | {r['assignment']} | {r['score']} | {'yes' if r['ok'] else 'NO'} "
                    f"| {', '.join(r['failed'])} | {', '.join(r['declared'])} |"
                )
        if "skipped" in summary:
            lines.append(f"skipped: {summary['skipped']}")
    return "\n".join(lines) + "\n"
