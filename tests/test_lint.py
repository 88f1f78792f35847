"""Ruff lint and format, notebooks included (the configuration is in pyproject.toml)."""

import subprocess
import sys

from grader.runtime import course


def test_ruff_check():
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "."],
        capture_output=True,
        text=True,
        cwd=course.REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_format():
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."],
        capture_output=True,
        text=True,
        cwd=course.REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
