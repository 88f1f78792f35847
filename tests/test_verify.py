"""The GPU verification command (grader.verify): its preflight, its split of the demo into two
parts that cover every notebook, and part 1 run end to end on this machine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from grader import course, verify


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
def test_part_one_runs_and_writes_its_summaries(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "verify-gpu", "--part", "1", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=course.REPO, timeout=580,
    )  # fmt: skip
    result = json.loads((tmp_path / "part1.json").read_text())
    assert [s["name"] for s in result["steps"]] == ["pytest-cuda", "measure"]
    assert "verify-gpu part 1" in proc.stdout
    assert (tmp_path / "pytest-cuda.log").is_file()
    if not torch.cuda.is_available():
        assert result["steps"][1]["summary"] == {"skipped": "no CUDA GPU"}
        assert "skipped" in result["steps"][0]["summary"]["summary"]
        assert proc.returncode == 0 and result["ok"]
