"""Prove the course on a GPU within a lent machine's budget: ``python -m grader verify-gpu``.

A developer lent a GPU has about 30 minutes of it, at most 10 per command, and the machine
goes back after 30 s idle. The verification is therefore three commands of under 9 minutes
each, issued back to back, each writing its log and a summary into ``--out`` (default
``verify-gpu/``):

``--part 1``  a **preflight** (GPU, driver, torch and CUDA versions, a C compiler and
              ``Python.h`` for Triton and Inductor, the packages grading needs), the **CUDA
              tests** (``pytest -m cuda``, less the in-process run of every sample that parts
              2 and 3 make through the real autograde) and ``python -m grader measure``, which writes
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

import contextlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path

from grader.runtime import course

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
    """One step of a part: a command, its outcome and where its output went."""

    name: str
    command: list[str]
    ok: bool = False
    seconds: float = 0.0
    log: str = ""
    summary: dict = field(default_factory=dict)


#: Part 1's CUDA tests by default: all but the in-process run of every sample, which parts 2
#: and 3 grade on CUDA through the real autograde anyway (together they would not fit part 1's
#: time: 07 and 11 start their ranks as fresh processes on a GPU machine, 09 compiles with
#: Triton). ``-k sample_scores_as_declared_on_the_gpu`` runs them in a command of their own.
PART1_TESTS = "not sample_scores_as_declared_on_the_gpu"

#: Seconds a demo of one assignment needs at the least (kernel starts, registration); a
#: part does not start one with less time left, and names it in its "still to run" command.
MIN_DEMO_S = 60


def _run(step: Step, log: Path, timeout: int, env: dict | None = None) -> tuple[bool, str]:
    """Run ``step.command``, append its output to ``log`` under a header; return whether it was
    stopped at ``timeout`` seconds, and its output. A stopped step is killed with everything it
    started (kernels, ranks, compilers); its output so far is kept and ends with a line saying
    so: a lent GPU's command limit must never lose a whole part's results.
    """
    start = time.monotonic()
    stopped = False
    with tempfile.TemporaryFile("w+", errors="replace") as f:
        proc = subprocess.Popen(
            step.command, stdout=f, stderr=subprocess.STDOUT, cwd=course.REPO,
            start_new_session=True, env=env,
        )  # fmt: skip
        try:
            step.ok = proc.wait(timeout=timeout) == 0
        except subprocess.TimeoutExpired:
            stopped = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            f.write(f"\n[verify-gpu] stopped after {timeout} s\n")
        finally:
            with contextlib.suppress(ProcessLookupError):  # nothing of it outlives the step
                os.killpg(proc.pid, signal.SIGKILL)
        f.seek(0)
        text = f.read()
    step.seconds = round(time.monotonic() - start, 1)
    step.log = str(log)
    with log.open("a") as out:
        out.write(f"\n===== {step.name}: {' '.join(step.command)} =====\n{text}")
    return stopped, text


#: One line of ``pytest -v``: the test's id (which may hold spaces inside its parameters) and
#: its outcome.
_PYTEST_LINE = re.compile(r"^(\S.*?::.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?= |$)")
#: The same with pytest-xdist (``-n``): ``[gw4] [ 33%] FAILED tests/x.py::test[id]``.
_XDIST_LINE = re.compile(
    r"^\[gw\d+\] \[ *\d+%\] (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S.*::.*?) *$"
)
#: Each failure's report, appended as the test fails (tests/conftest.py), so a run stopped at
#: its time limit still says why.
FAILURE_LOG = "COURSE_FAILURE_LOG"
#: pytest's closing line, e.g. ``==== 1 failed, 20 passed, 3 skipped in 12.34s ====``.
_PYTEST_END = re.compile(
    r"^=+ .*\b(passed|failed|skipped|deselected|errors?|xfailed|xpassed|no tests ran)\b"
    r".* in [\d.]+s.*=+$"
)


def _pytest_summary(text: str) -> dict:
    """What a ``pytest -v`` run says: its closing line (or, for a run stopped at its time
    limit, the outcomes counted so far and the test it was stopped in), the failed tests and
    how many tests ran."""
    lines = text.splitlines()
    summary = next((line for line in reversed(lines) if _PYTEST_END.match(line)), "")
    outcomes: dict[str, str] = {}
    running = ""
    for line in lines:
        match = _PYTEST_LINE.match(line)
        xdist = _XDIST_LINE.match(line)
        if match:
            outcomes[match[1]] = match[2]
        elif xdist:
            outcomes[xdist[2]] = xdist[1]
        elif "::" in line and not line.startswith((" ", "_", "=", "E ")):
            running = line.split(" ", 1)[0]
    failed = sorted(t for t, o in outcomes.items() if o in ("FAILED", "ERROR"))
    if "short test summary info" in text:  # also errors outside a test (collection, fixtures)
        tail = text.split("short test summary info", 1)[1].splitlines()[1:]
        for line in tail:
            if line.startswith(("FAILED ", "ERROR ")):
                test = line.split(" - ", 1)[0].split(" ", 1)[1]
                if test not in failed:
                    failed.append(test)
    if not summary:
        counts = {o: list(outcomes.values()).count(o) for o in sorted(set(outcomes.values()))}
        shown = ", ".join(f"{n} {o.lower()}" for o, n in counts.items()) or "no test finished"
        summary = f"stopped before the end: {shown}" + (
            f"; stopped in {running}" if running else ""
        )
    return {"summary": summary.strip("= "), "failed": failed, "ran": len(outcomes)}


def _failure_reasons(text: str) -> dict[str, str]:
    """Per failed test in a failure log (tests/conftest.py), the last ``E`` line of its report
    (the assertion or error), shortened: what a part's summary shows beside the test."""
    reasons: dict[str, str] = {}
    for block in text.split("===== ")[1:]:
        header, _, body = block.partition(" =====\n")
        test = header.rsplit(" (", 1)[0]
        errors = [ln[1:].strip() for ln in body.splitlines() if ln.startswith("E ")]
        last = errors or body.strip().splitlines() or [""]
        reasons[test] = last[-1][:300]
    return reasons


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
    return {"all_as_declared": bool(rows) and all(r["ok"] for r in rows), "rows": rows}


def demo_assignments(part: int) -> list[str]:
    """The assignments graded by demo part 2 or 3."""
    ids = course.assignments()
    half = (len(ids) + 1) // 2
    return ids[:half] if part == 2 else ids[half:]


def _archive_figures(out: Path) -> str | None:
    """Pack ``images/recorded_figures.json`` and ``images/measured/`` into ``out/figures.tgz``
    (what comes back from a lent machine is a few files, not a folder of plots); return its
    path, or None when nothing was measured."""
    from grader.runtime.recorded import RECORDED_FILE
    from grader.tools.measure import PLOTS

    members = [p for p in (RECORDED_FILE, PLOTS) if p.exists()]
    if not members:
        return None
    archive = out / "figures.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in members:
            tar.add(path, arcname=str(path.relative_to(course.REPO)))
    return str(archive)


def run_part(
    part: int,
    out: Path,
    *,
    budget_s: int = 530,
    assignments: list[str] | None = None,
    only: list[str] | None = None,
    keyword: str | None = None,
    measure: bool = True,
    workers: int = 1,
    jobs: int | None = None,
) -> dict:
    """Run one part; write ``part<N>.json``, ``part<N>.md`` and ``part<N>.log`` into ``out``
    (and, after part 1 on a GPU, ``figures.tgz``); return the summary.

    Everything a part writes is at most four files in ``out`` itself, so it all comes back
    from a lent machine whose ``$OUT`` returns at most eight. Each step stops at the part's
    budget with what it had so far: a ``pytest`` run stopped early reports the outcomes it
    reached, ``measure`` has already kept each finished group, and parts 2 and 3 grade one
    assignment at a time and name the ones left for a next command.

    Args:
        part: 1 (preflight, ``pytest -m cuda``, ``measure``), 2 or 3 (the demo on CUDA).
        out: Folder for what the part writes.
        budget_s: Seconds the whole part may take (a lent machine allows 600 per command).
        assignments: Parts 2 and 3: grade these instead of the part's half of the course.
        only: Part 1: measure only these figure groups (``measure --only``).
        keyword: Part 1: run the CUDA tests that match (``pytest -k``) instead of
            :data:`PART1_TESTS`.
        measure: Part 1: also run ``measure`` after the tests. False when ``measure`` runs on
            its own, alone on the GPU, and the tests share a short lease with parts 2 and 3
            (figures taken beside other GPU work would not be the GPU's own).
        workers: Part 1: run the CUDA tests in this many processes (``pytest -n``, which
            needs pytest-xdist; the GPU images have it).
        jobs: Parts 2 and 3: submissions graded at the same time (``demo --jobs``; default
            the demo's own).

    Raises:
        ValueError: ``part`` is not 1, 2 or 3, or an option does not belong to it.
    """
    if part not in (1, 2, 3):
        raise ValueError(f"--part must be 1, 2 or 3, not {part}")
    if part == 1 and assignments:
        raise ValueError("--assignment belongs to parts 2 and 3 (the demo), not part 1")
    if part != 1 and (only or keyword or not measure or workers > 1):
        raise ValueError(
            "--only, -k, --no-measure and --workers belong to part 1 (measure and the CUDA tests)"
        )
    if part == 1 and jobs:
        raise ValueError("--jobs belongs to parts 2 and 3 (the demo), not part 1")
    if workers > 1 and importlib.util.find_spec("xdist") is None:
        raise ValueError("--workers needs pytest-xdist (pip install pytest-xdist)")
    from grader.tools.measure import GPU_FIGURES

    unknown = sorted(set(only or []) - {name for name, _, _ in GPU_FIGURES})
    if unknown:
        raise ValueError(f"unknown figure group(s) {unknown}; see python -m grader measure --list")
    import torch

    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"part{part}.log"
    log.write_text("")
    started = time.monotonic()

    def left() -> int:
        return budget_s - int(time.monotonic() - started)

    gpu = torch.cuda.is_available()
    result: dict = {
        "part": part,
        "date": date.today().isoformat(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if gpu else "no CUDA GPU",
        "preflight": [asdict(c) for c in preflight()],
        "steps": [],
    }
    python = sys.executable
    if part == 1:
        tests = Step(
            "pytest-cuda",
            [python, "-m", "pytest", "-m", "cuda", "-v", "-p", "no:randomly",
             "-o", "addopts=-ra", "--timeout", "240", "--durations", "25",
             "-k", keyword or PART1_TESTS,
             *(["-n", str(workers)] if workers > 1 else []), "tests"],
        )  # fmt: skip
        with tempfile.TemporaryDirectory() as tmp:
            failures = Path(tmp) / "failures.txt"
            env = dict(os.environ, **{FAILURE_LOG: str(failures)})
            _, text = _run(
                tests, log, timeout=max(60, left() // 2 if measure else left() - 5), env=env
            )
            reasons = failures.read_text(errors="replace") if failures.is_file() else ""
        tests.summary = _pytest_summary(text)
        if reasons:
            with log.open("a") as out:
                out.write(f"\n===== failures, as they happened =====\n{reasons}")
            tests.summary["reasons"] = _failure_reasons(reasons)
        result["steps"].append(asdict(tests))
        measure_step = Step(
            "measure", [python, "-m", "grader", "measure", *(["--only", *only] if only else [])]
        )
        if not measure:
            measure_step.summary = {"skipped": "--no-measure (measure runs on its own)"}
        elif gpu and left() > 60:
            measure_step.summary = {"groups": only or "all"}
            _run(measure_step, log, timeout=left() - 15)
            archive = _archive_figures(out)
            if archive:
                measure_step.summary["archive"] = archive
        else:
            measure_step.summary = {"skipped": "no CUDA GPU" if not gpu else "no time left"}
        result["steps"].append(asdict(measure_step))
    else:
        ids = [course.check_assignment(a) for a in (assignments or demo_assignments(part))]
        rows: list[dict] = []
        rest: list[str] = []
        for i, aid in enumerate(ids):
            if left() < MIN_DEMO_S:
                rest = ids[i:]
                break
            with tempfile.TemporaryDirectory() as tmp:
                demo_json = Path(tmp) / "demo.json"
                demo = Step(
                    f"demo-{aid}",
                    [python, "-m", "grader", "demo", "--no-feedback", "--json", str(demo_json),
                     "--assignment", aid, *(["--jobs", str(jobs)] if jobs else [])],
                )  # fmt: skip
                stopped, _ = _run(demo, log, timeout=left() - 5)
                demo.summary = _demo_summary(demo_json)
            if stopped:
                demo.summary["skipped"] = "stopped at the part's time limit (graded again next)"
            rows += demo.summary.get("rows", [])
            result["steps"].append(asdict(demo))
            if stopped:
                rest = ids[i:]
                break
        if rest:
            result["still_to_run"] = rest
            result["next_command"] = (
                f"python -m grader verify-gpu --part {part} --assignment {' '.join(rest)}"
            )
        result["demo"] = {
            "all_as_declared": bool(rows) and all(r["ok"] for r in rows),
            "rows": rows,
        }
    result["seconds"] = round(time.monotonic() - started, 1)
    result["ok"] = not result.get("still_to_run") and all(
        s["ok"] for s in result["steps"] if not s["summary"].get("skipped")
    )
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
            reasons = summary.get("reasons", {})
            lines += [
                f"- {line}" + (f": {reasons[line]}" if line in reasons else "")
                for line in summary.get("failed", [])
            ]
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
        if "archive" in summary:
            lines.append(
                f"Figures and plots packed in {summary['archive']}: unpack at the repository root "
                "(`tar -xzf figures.tgz`) and commit them."
            )
    if result.get("still_to_run"):
        lines += [
            "",
            f"## Not reached in this part's time: {', '.join(result['still_to_run'])}",
            f"Run next: `{result['next_command']}`",
        ]
    lines += [
        "",
        f"Every step's output: {Path(result['steps'][0]['log']).name}" if result["steps"] else "",
    ]
    return "\n".join(lines) + "\n"
