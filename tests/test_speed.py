"""What makes grading fast without changing what it decides: the caches a class reuses (Triton's
compile cache relocated into each kernel's home, the kernel view kept per version of the course,
nbgrader's gradebook stamp read in process), the time by phase each submission reports, and the
benchmark's table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from grader.grading import config, kernel_view, report, sandbox
from grader.tools import bench


# --------------------------------------------------------------------------- Triton's cache
def _triton_entry(root: Path, key: str, kernel: str) -> Path:
    """One cached kernel as Triton's FileCacheManager lays it out: its files and the group file
    naming them by absolute path."""
    folder = root / key
    folder.mkdir(parents=True)
    files = {}
    for ext in ("json", "cubin", "ptx"):
        (folder / f"{kernel}.{ext}").write_text(f"{kernel} {ext}")
        files[f"{kernel}.{ext}"] = str(folder / f"{kernel}.{ext}")
    (folder / f"__grp__{kernel}.json").write_text(json.dumps({"child_paths": files}))
    return folder


def test_a_copied_triton_cache_names_its_own_files_after_relocation(tmp_path, monkeypatch):
    seed = tmp_path / "seed" / "triton"
    _triton_entry(seed, "KEYA", "matmul_kernel")
    _triton_entry(seed, "KEYB", "softmax_kernel")
    # a group that names a file elsewhere is left as it is
    (seed / "KEYC").mkdir()
    (seed / "KEYC" / "__grp__other.json").write_text(
        json.dumps({"child_paths": {"other.json": "/elsewhere/other.json"}})
    )
    (seed / "KEYD").mkdir()
    (seed / "KEYD" / "__grp__broken.json").write_text("not json")
    home = tmp_path / "home" / "triton"
    import shutil

    shutil.copytree(seed, home)
    assert sandbox.relocate_triton_cache(seed, home) == 2
    shutil.rmtree(seed)  # as in the sandbox: the seed's own files are out of sight
    group = json.loads((home / "KEYA" / "__grp__matmul_kernel.json").read_text())
    assert group["child_paths"]["matmul_kernel.cubin"] == str(home / "KEYA" / "matmul_kernel.cubin")
    assert all(Path(p).is_file() for p in group["child_paths"].values())
    other = json.loads((home / "KEYC" / "__grp__other.json").read_text())
    assert other["child_paths"]["other.json"] == "/elsewhere/other.json"
    assert sandbox.relocate_triton_cache(seed, tmp_path / "missing") == 0

    # Triton itself reads the relocated group back (a cache hit), from the copy alone
    triton_cache = pytest.importorskip("triton.runtime.cache")
    from triton import knobs

    monkeypatch.setattr(knobs.cache, "dir", str(home))
    got = triton_cache.FileCacheManager("KEYA").get_group("matmul_kernel.json")
    assert got is not None and Path(got["matmul_kernel.cubin"]).read_text() == "matmul_kernel cubin"


def test_a_fresh_home_holds_the_seed_with_triton_pointing_at_the_copy(tmp_path):
    seed_home = tmp_path / "seed"
    _triton_entry(seed_home / ".cache" / "triton", "KEY", "bias_gelu_kernel")
    (seed_home / ".cache" / "torchinductor").mkdir(parents=True)
    settings = sandbox.SandboxSettings(
        staging=str(tmp_path / "box"), cwd=str(tmp_path), seed_home=str(seed_home)
    )
    home = sandbox.fresh_home(settings)
    group = json.loads((home / ".cache/triton/KEY/__grp__bias_gelu_kernel.json").read_text())
    assert all(str(home) in p for p in group["child_paths"].values())
    assert (home / ".cache" / "torchinductor").is_dir()


# --------------------------------------------------------------------------- the kernel view
def test_the_cached_kernel_view_is_the_view_and_a_broken_cache_is_rebuilt(tmp_path):
    made = kernel_view.cached_views(tmp_path)
    assert made == kernel_view.views()
    (cache,) = tmp_path.glob("kernel_view-*.json")
    assert kernel_view.cached_views(tmp_path) == made  # read back
    cache.write_text("{broken")
    assert kernel_view.cached_views(tmp_path) == made
    assert json.loads(cache.read_text())  # written again, whole


def test_the_kernel_view_digest_follows_the_checks(tmp_path, monkeypatch):
    before = kernel_view.inputs_digest()
    assert before == kernel_view.inputs_digest()
    fake = tmp_path / "grader"
    (fake / "checks").mkdir(parents=True)
    (fake / "checks" / "ch01.py").write_text("x = 1\n")
    monkeypatch.setattr(kernel_view.course, "PACKAGE", fake)
    monkeypatch.setattr(kernel_view.course, "REPO", tmp_path)
    monkeypatch.setattr(kernel_view.course, "SOLUTIONS", tmp_path / "solutions")
    one = kernel_view.inputs_digest()
    (fake / "checks" / "ch01.py").write_text("x = 2\n")
    assert kernel_view.inputs_digest() != one


# --------------------------------------------------------------------------- nbgrader's stamp
def test_the_gradebook_stamp_read_in_process_is_the_alembic_commands():
    scripts = sysconfig.get_path("scripts")
    env = dict(os.environ, PATH=scripts + os.pathsep + os.environ.get("PATH", ""))
    out = subprocess.run(
        [sys.executable, "-c", "from nbgrader import api; print(api.get_alembic_version())"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert config.alembic_head() == out.stdout.strip()
    config.use_alembic_in_process()
    from nbgrader import api

    assert api.get_alembic_version is config.alembic_head


def test_a_new_gradebook_is_stamped_without_a_process(tmp_path, monkeypatch):
    config.use_alembic_in_process()
    from nbgrader.api import Gradebook

    def no_process(*args, **kwargs):
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "check_output", no_process)
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        version = gb.db.execute(
            __import__("sqlalchemy").text("SELECT version_num FROM alembic_version")
        ).scalar()
    assert version == config.alembic_head()


# --------------------------------------------------------------------------- time by phase
def test_the_stopwatch_adds_up_each_phase_and_refuses_an_unknown_one():
    watch = report.Stopwatch()
    watch.add("cells", 1.0)
    with watch.timing("cells"):
        pass
    watch.add("checks", -1)  # a clock that went back counts nothing
    assert set(watch.rounded()) == {"cells", "checks"}
    assert watch.rounded()["cells"] >= 1.0 and watch.rounded()["checks"] == 0.0
    assert list(watch.rounded()) == [p for p in report.PHASES if p in watch.seconds]
    with pytest.raises(ValueError, match="unknown phase"):
        watch.add("coffee", 1.0)


def _result(seconds, phases):
    return report.Result("s", "a", "graded", seconds=seconds, phases=phases)


def test_mean_phases_and_the_class_share():
    results = [
        _result(4.0, {"start": 1.0, "cells": 2.0, "checks": 2.0}),
        _result(6.0, {"start": 1.0, "cells": 4.0, "checks": 2.0}),
    ]
    phases = bench.mean_phases(results, wall_s=16.0, jobs=1)
    assert phases["cells"] == 3.0 and phases["checks"] == 2.0 and phases["start"] == 1.0
    assert phases["class"] == 2.0  # 16 s of wall, 12 s in the submissions: 4 s for 2
    assert bench.mean_phases([], 1.0, 1) == {}


def _run(aid, jobs, per, ok=True):
    return bench.Run(2, jobs, per * 2, per, 1.0, ok, assignment=aid, phases={"cells": 1.5})


def test_the_table_has_a_row_per_assignment_and_the_medians(tmp_path):
    rows = [_run("01_a", 1, 10.0), _run("01_a", 2, 6.0), _run("02_b", 1, 4.0),
            _run("02_b", 2, 3.0, ok=False), _run("03_c", 1, 2.0), _run("03_c", 2, 1.0)]  # fmt: skip
    table = bench.format_table(rows)
    lines = table.splitlines()
    assert lines[0].startswith("| assignment | s per submission, 1 at a time |")
    assert "| 01_a | 10.0 | 6.0 |" in table and "3.0 (not all graded)" in table
    assert "Median at 1 at a time: 4.0 s per submission; slowest 10.0 s." in table
    assert "Median at 2 at a time: 3.0 s per submission; slowest 6.0 s." in table
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{bench.README_BEGIN}\nold table\n{bench.README_END}\nafter\n")
    bench.write_readme(rows, readme)
    text = readme.read_text()
    assert "old table" not in text and "| 03_c |" in text
    assert text.startswith("before\n") and text.endswith(f"{bench.README_END}\nafter\n")
    readme.write_text("no markers\n")
    with pytest.raises(ValueError, match="benchmark-table"):
        bench.write_readme(rows, readme)


def test_a_timed_test_cell_counts_in_checks_and_under_its_grade_id():
    watch = report.Stopwatch()
    with watch.timing("checks", check="test_a"):
        pass
    with watch.timing("cells"):
        pass
    assert set(watch.checks) == {"test_a"}
    assert watch.total("checks", "cells") == pytest.approx(sum(watch.seconds.values()))
