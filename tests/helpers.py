"""Helpers shared by the chapter tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from grader.runtime import course
from grader.tools import samples

#: Exercises whose checks take seconds by design: they start rank processes (07, 11), a fresh
#: Python process (09's saved program), train a model (06), compile with Inductor (09, 10's
#: compiled answers) or time the answer (a DataLoader's or a compiled function's speed-up).
#: Their reference and sample tests are `slow`, so the fast tier (`pytest -m "not slow"`) runs
#: every other exercise's checks against the reference and every sample in minutes; the full
#: command runs them all.
SLOW_EXERCISES = {
    "06_amp": {"train_amp"},
    "07_multi_gpu": {"average_gradients", "ddp_train"},
    "08_cpu_parallelism": {"loader_speedup"},
    "09_compilation": {"compile_speedup", "export_model"},
    "10_profiling": {"fused_step"},
    "11_scaling": {"bucketed_ddp", "sharded_optimizer", "BucketedDDP", "ShardedOptimizer"},
    "13_parallelism": {
        "column_row_mlp",
        "sequence_parallel_mlp",
        "ColumnRowMLP",
        "SequenceParallelMLP",
    },
}
#: Samples that wait for a deadline by design (ranks that hang until the launcher stops them).
WAITING_SAMPLES = {"11_scaling": {"wrong_zero_owner_only_broadcast"}}


def _slow_marks(assignment: str, exercises, sample: str = "") -> list:
    import pytest

    measured = SLOW_EXERCISES.get(assignment, set()) & set(exercises)
    waiting = sample in WAITING_SAMPLES.get(assignment, set())
    return [pytest.mark.slow] if measured or waiting else []


def autograde_flags() -> list[str]:
    """Extra arguments for ``python -m grader autograde`` in tests: ``--allow-root-unsandboxed``
    where the tests run as root on a machine that cannot sandbox kernels (bubblewrap missing),
    so that the tests' own submissions are graded as before; nothing elsewhere (CI installs
    bubblewrap: there the command must grade sandboxed, never as root)."""
    import os

    from grader.grading import sandbox

    return (
        ["--allow-root-unsandboxed"] if os.geteuid() == 0 and not sandbox.bwrap_available() else []
    )


def sample_params(assignment: str):
    """pytest params: one per sample answer of an assignment, with its name as id (marked
    `slow` where the sample answers one of :data:`SLOW_EXERCISES` or waits for a deadline)."""
    import pytest

    return [
        pytest.param(s, id=s.name, marks=_slow_marks(assignment, s.cells, s.name))
        for s in samples.load_samples(assignment)
    ]


def exercise_params(assignment: str, names: list[str]):
    """pytest params: one per exercise name (marked `slow` for one of :data:`SLOW_EXERCISES`)."""
    import pytest

    return [pytest.param(n, id=n, marks=_slow_marks(assignment, [n])) for n in names]


def assert_sample_scores_as_declared(sample: samples.Sample) -> None:
    """Grade the sample in-process (hidden tests included, grading mode) and compare
    the failing test cells with the ones it declares."""
    results = samples.run_test_cells(sample.assignment, sample.cells, only_for=set(sample.cells))
    assert_results_as_declared(sample, results, gpu=torch.cuda.is_available())


def assert_results_as_declared(sample: samples.Sample, results: dict[str, str], gpu: bool) -> None:
    """Compare a sample's results (test grade id -> "" or the failure) on a machine with or
    without a GPU with what the sample declares.

    A mistake must also be provable: without a GPU it must fail a cell that is not CUDA-only;
    on a GPU, that or a cell it declares for a GPU. So on a GPU a mistake declared to show
    only without one (``# fails-on-cpu:`` alone, such as calling ``torch.cuda.synchronize()``
    for CPU tensors) rightly gets full marks: machines without a GPU prove it.
    """
    assert results, f"no test cells ran for {sample.name}"
    failing = {k for k, v in results.items() if v}
    expected = sample.expected_failures(gpu) & set(results)
    if not gpu:
        expected |= {k for k in results if k.endswith("_cuda")}
    allowed = expected | (sample.allowed_failures(gpu) & set(results))
    assert expected <= failing <= allowed, (
        f"{sample.assignment}/{sample.name}: failing {sorted(failing)}, declared {sorted(expected)}\n"
        + "\n".join(f"  {k}: {v}" for k, v in results.items() if v)
    )
    if sample.is_mistake:
        checkable = sample.expected_failures(gpu=False) - {
            k for k in results if k.endswith("_cuda")
        }
        if gpu:
            checkable |= sample.expected_failures(gpu=True)
        assert checkable, (
            f"{sample.name} loses points only in CUDA cells, so this machine cannot prove it: "
            "give it a CPU-visible failure or mark the test cuda"
        )


def run_every_check(checks_module, name: str, value) -> None:
    """Run check_<name>, check_<name>_hidden and check_<name>_cuda (those that exist) on value."""
    for suffix in ("", "_hidden", "_cuda"):
        check = getattr(checks_module, f"check_{name}{suffix}", None)
        if check is not None:
            check(value)


def reference_fn(assignment: str, name: str):
    """A function or constant of the reference solution."""
    return getattr(course.reference(assignment), name)


def answer_fn(assignment: str, answer: str, name: str):
    """``name`` as the answer ``answer`` defines it: the reference solution's (``"reference"``)
    or a sample's (``wrong_...``/``correct_...``, from its cell ``name``)."""
    if answer == "reference":
        return reference_fn(assignment, name)
    import linecache

    (sample,) = [s for s in samples.load_samples(assignment) if s.name == answer]
    namespace: dict = {"__name__": "__main__"}
    code = sample.cells[name]
    filename = f"<sample {answer}:{name}>"
    # In the line cache, as IPython keeps a cell: @triton.jit reads its function's source.
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - the course's own sample
    return namespace[name]


def wait_for(predicate: Callable[[], object], seconds: float, what: str, every: float = 0.5):
    """Poll ``predicate`` every ``every`` s until it returns something true (returned), or raise
    ``AssertionError`` naming ``what`` after ``seconds`` s."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds:.0f} s waiting for {what}")


#: Debian's Chromium and its driver (tests/test_browser.py, tests/test_hub.py); None if absent.
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@contextlib.contextmanager
def headless_chromium(artifacts: Path, script_timeout_s: float | None = None) -> Iterator:
    """A headless Chromium driven through Debian's chromedriver (Selenium), 1400x1000 at scale 1,
    with ``artifacts`` made and emptied of old screenshots (``*.png``); quit on exit.

    Args:
        artifacts: Folder the test saves its screenshots in.
        script_timeout_s: Limit for ``execute_async_script`` calls (Selenium's default if None).
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download a driver
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    if script_timeout_s is not None:
        driver.set_script_timeout(script_timeout_s)
    artifacts.mkdir(parents=True, exist_ok=True)
    for old in artifacts.glob("*.png"):
        old.unlink()
    try:
        yield driver
    finally:
        driver.quit()


def run_demo(root: Path, kind: str) -> dict:
    """Run ``python -m grader demo --class KIND --jobs 2`` as an instructor runs it, keeping its
    folder under ``root``.

    Returns:
        ``proc`` (the finished process), ``work`` (the kept working folder) and ``cells``
        ((student, assignment) -> the result's JSON row).
    """
    import json
    import subprocess
    import sys

    work, report = root / "work", root / "demo.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "demo",
            "--class",
            kind,
            "--jobs",
            "2",
            "--keep",
            str(work),
            "--json",
            str(report),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        cwd=course.REPO,
    )
    data = json.loads(report.read_text()) if report.is_file() else {"results": []}
    cells = {(r["student"], r["assignment"]): r for r in data["results"]}
    return {"proc": proc, "work": work, "cells": cells}
