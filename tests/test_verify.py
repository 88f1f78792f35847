"""The GPU verification command (grader.tools.verify): its preflight, its split of the demo into two
parts that cover every notebook, and part 1 run end to end on this machine."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from grader.runtime import course
from grader.tools import verify


def test_preflight_names_what_grading_needs():
    names = {c.name for c in verify.preflight()}
    assert {"CUDA GPU", "torch", "C compiler", "Python.h", "nbgrader", "bubblewrap"} <= names


def test_the_two_demo_parts_cover_every_notebook_once():
    two, three = verify.demo_assignments(2), verify.demo_assignments(3)
    assert sorted(two + three) == course.assignments() and not set(two) & set(three)


def test_compile_problems_only_for_compiling_notebooks(monkeypatch):
    missing = [verify.Check("C compiler", False, "none found"), verify.Check("Python.h", True, "x")]
    monkeypatch.setattr(verify, "preflight", lambda: missing)
    assert verify.compile_problems(["01_devices"]) == []
    assert verify.compile_problems(["09_compilation"]) == ["C compiler: none found"]


@pytest.mark.timeout(600)
@pytest.mark.slow  # runs verify-gpu steps in subprocesses
def test_part_one_runs_and_writes_its_summaries(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "verify-gpu", "--part", "1", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=course.REPO, timeout=580,
    )  # fmt: skip
    result = json.loads((tmp_path / "part1.json").read_text())
    assert [s["name"] for s in result["steps"]] == ["pytest-cuda", "measure"]
    assert "verify-gpu part 1" in proc.stdout
    assert "===== pytest-cuda:" in (tmp_path / "part1.log").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["part1.json", "part1.log", "part1.md"]
    if not torch.cuda.is_available():
        assert result["steps"][1]["summary"] == {"skipped": "no CUDA GPU"}
        assert "skipped" in result["steps"][0]["summary"]["summary"]
        assert proc.returncode == 0 and result["ok"]


def test_a_pytest_run_stopped_at_its_limit_still_reports_what_ran():
    text = (
        "tests/test_cuda.py::test_a PASSED [  1%]\n"
        "tests/test_cuda.py::test_b[x-1] FAILED [  2%]\n"
        "tests/test_cuda.py::test_c SKIPPED (needs two GPUs) [  3%]\n"
        "\n[verify-gpu] stopped after 265 s\n"
    )
    summary = verify._pytest_summary(text)
    assert summary["summary"] == "stopped before the end: 1 failed, 1 passed, 1 skipped"
    assert summary["failed"] == ["tests/test_cuda.py::test_b[x-1]"] and summary["ran"] == 3
    done = (
        text
        + "FAILED tests/test_cuda.py::test_b[x-1] - assert 1 == 2\n= 1 failed, 1 passed in 3.2s =\n"
    )
    summary = verify._pytest_summary(done)
    assert summary["summary"] == "1 failed, 1 passed in 3.2s"
    assert summary["failed"] == ["tests/test_cuda.py::test_b[x-1]"]


def test_pytest_xdist_lines_are_read_too():
    # As an H200 printed them on 2026-11-26 (pytest -n 11), the run stopped at its limit.
    text = (
        "[gw4] [ 33%] FAILED tests/test_cuda.py::test_s[04_memory/correct_h2d_perf_counter] \n"
        "[gw0] [ 98%] PASSED tests/test_cuda.py::test_s[11_scaling/wrong_zero_split_by_count] \n"
        "[verify-gpu] stopped after 265 s\n"
    )
    summary = verify._pytest_summary(text)
    assert summary["summary"] == "stopped before the end: 1 failed, 1 passed"
    assert summary["failed"] == ["tests/test_cuda.py::test_s[04_memory/correct_h2d_perf_counter]"]


def test_each_failure_is_logged_as_it_happens_and_its_reason_summarised(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from tests import conftest

    log = tmp_path / "failures.txt"
    monkeypatch.setenv(conftest.FAILURE_LOG, str(log))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    report = SimpleNamespace(
        failed=True, nodeid="tests/test_cuda.py::test_s[a b]", when="call",
        longreprtext="    def test_s():\n>       assert 1 == 2\nE       assert 1 == 2\n",
    )  # fmt: skip
    conftest.pytest_runtest_logreport(report)
    conftest.pytest_runtest_logreport(SimpleNamespace(failed=False))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")  # a worker's copy: the controller writes
    conftest.pytest_runtest_logreport(report)
    reasons = verify._failure_reasons(log.read_text())
    assert reasons == {"tests/test_cuda.py::test_s[a b]": "assert 1 == 2"}


def _fake_demo(monkeypatch, seconds_each: float, stop_at: str | None = None):
    """Replace the demo command: each call takes ``seconds_each`` of the part's clock and writes
    the JSON a demo of its one assignment writes; the demo of ``stop_at`` is stopped at its
    time limit instead (no JSON)."""
    clock = {"now": 0.0}
    monkeypatch.setattr(verify.time, "monotonic", lambda: clock["now"])
    graded = []

    def run(step, log, timeout):
        aid = step.command[step.command.index("--assignment") + 1]
        path = Path(step.command[step.command.index("--json") + 1])
        if aid == stop_at:
            clock["now"] += timeout
            return True, ""
        row = {"student": "reference", "assignment": aid, "score": 9, "max_score": 13, "ok": True,
               "failed_cells": [], "expected_failed_cells": []}  # fmt: skip
        path.write_text(json.dumps({"gpu": True, "results": [row]}))
        clock["now"] += seconds_each
        step.ok, step.log = True, str(log)
        graded.append(aid)
        return False, ""

    monkeypatch.setattr(verify, "_run", run)
    return graded


def test_a_demo_part_grades_one_assignment_at_a_time_and_names_what_is_left(tmp_path, monkeypatch):
    graded = _fake_demo(monkeypatch, seconds_each=200)
    ids = verify.demo_assignments(2)
    result = verify.run_part(2, tmp_path, budget_s=530)
    assert graded == ids[:3]  # 3 x 200 s: the fourth would start with 1 s... no: with < 60 s
    assert result["still_to_run"] == ids[3:] and not result["ok"]
    assert [r["assignment"] for r in result["demo"]["rows"]] == ids[:3]
    text = (tmp_path / "part2.md").read_text()
    assert f"--part 2 --assignment {' '.join(ids[3:])}" in text
    left = ids[3:]
    while left:  # each later part grades the next three and names the rest, until none is left
        again = verify.run_part(2, tmp_path, budget_s=530, assignments=left)
        left = left[3:]
        assert again.get("still_to_run", []) == left and again["ok"] == (not left)
    assert graded == ids and "still_to_run" not in again


def test_options_of_one_part_are_refused_by_the_others(tmp_path):
    with pytest.raises(ValueError, match="parts 2 and 3"):
        verify.run_part(1, tmp_path, assignments=["01_devices"])
    with pytest.raises(ValueError, match="part 1"):
        verify.run_part(3, tmp_path, only=["matmul"])
    with pytest.raises(ValueError):
        verify.run_part(2, tmp_path, assignments=["no_such_notebook"])


def test_the_figures_travel_as_one_archive(tmp_path, monkeypatch):
    import tarfile

    from grader.runtime import recorded
    from grader.tools import measure

    images = tmp_path / "repo" / "images"
    (images / "measured").mkdir(parents=True)
    (images / "recorded_figures.json").write_text("[]")
    (images / "measured" / "matmul.png").write_bytes(b"png")
    monkeypatch.setattr(course, "REPO", tmp_path / "repo")
    monkeypatch.setattr(recorded, "RECORDED_FILE", images / "recorded_figures.json")
    monkeypatch.setattr(measure, "PLOTS", images / "measured")
    archive = verify._archive_figures(tmp_path)
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == [
            "images/measured", "images/measured/matmul.png", "images/recorded_figures.json"
        ]  # fmt: skip


def test_a_demo_stopped_at_the_limit_is_graded_again_next(tmp_path, monkeypatch):
    ids = verify.demo_assignments(3)
    _fake_demo(monkeypatch, seconds_each=100, stop_at=ids[1])
    result = verify.run_part(3, tmp_path, budget_s=530)
    assert result["still_to_run"] == ids[1:] and not result["ok"]
    assert result["steps"][1]["summary"]["skipped"].startswith("stopped")
    assert [r["assignment"] for r in result["demo"]["rows"]] == ids[:1]


def test_a_part_that_graded_nothing_is_not_all_as_declared(tmp_path, monkeypatch):
    _fake_demo(monkeypatch, seconds_each=1)
    result = verify.run_part(2, tmp_path, budget_s=30)
    assert result["demo"] == {"all_as_declared": False, "rows": []}
    assert result["still_to_run"] == verify.demo_assignments(2) and not result["ok"]


@pytest.mark.slow  # runs verify-gpu steps in subprocesses
def test_a_step_past_its_limit_is_stopped_with_everything_it_started(tmp_path):
    marker = tmp_path / "child-alive"
    step = verify.Step(
        "sleepy",
        ["sh", "-c", f"(sleep 3; touch {marker}) & echo started; sleep 100"],
    )
    log = tmp_path / "part.log"
    stopped, text = verify._run(step, log, timeout=1)
    assert stopped is True and "started" in text
    time.sleep(3)
    assert not marker.exists()  # the background child died with the step
    assert "started" in log.read_text() and "stopped after 1 s" in log.read_text()
    assert not step.ok


@pytest.mark.slow  # runs verify-gpu steps in subprocesses
def test_real_pytest_output_is_read_right(tmp_path):
    """A real ``pytest -v`` run: ids with spaces, captured output that looks like outcomes."""
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('v', ['a b', 'c'])\n"
        "def test_p(v):\n"
        "    print('FAILED to warm cache')\n"
        "    assert v == 'c'\n"
        "def test_ok():\n"
        "    pass\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:randomly", "-p", "no:cacheprovider",
         "-o", "addopts=-ra", str(tmp_path / "test_x.py")],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    summary = verify._pytest_summary(proc.stdout)
    assert summary["summary"].startswith("1 failed, 2 passed in ")
    assert summary["ran"] == 3
    assert len(summary["failed"]) == 1 and summary["failed"][0].endswith("test_p[a b]")
