"""`python -m grader measure`: the published-peak table, the ratio to peak, the records file,
and the behaviour without a GPU (measures what a CPU shows, lists the rest, writes nothing to
the recorded figures, exits 0). On a CUDA machine, two cheap figure groups run for real."""

import json
import subprocess
import sys

import pytest
import torch

from grader.runtime import course, recorded
from grader.tools import measure

GPU = torch.cuda.is_available()


@pytest.mark.parametrize(
    "name, bf16, memory",
    [
        ("NVIDIA H100 80GB HBM3", 989.4, 3350.0),
        ("NVIDIA H100 PCIe", 756.5, 2000.0),
        ("NVIDIA H200", 989.4, 4800.0),
        ("NVIDIA A100-SXM4-80GB", 312.0, 2039.0),
    ],
)
def test_known_gpus_have_their_published_peaks(name, bf16, memory):
    peak = measure.find_peak(name)
    assert peak is not None and peak.tflops["bf16"] == bf16 and peak.memory_gb_s == memory
    assert peak.source


def test_an_unknown_gpu_has_no_peak_and_rows_omit_the_ratio():
    assert measure.find_peak("NVIDIA GeForce GTX 1080") is None
    # variants whose peaks differ from the model name they contain are not guessed
    assert measure.find_peak("NVIDIA H200 NVL") is None
    assert measure.find_peak("NVIDIA A100 80GB PCIe") is None
    assert measure.find_peak("NVIDIA A100-SXM4-40GB").memory_gb_s == 1555.0
    row = measure.describe_row(measure.Figure("x", 5.0, "TFLOP/s", "tflops:bf16"), None)
    assert row == "x: 5 TFLOP/s"


def test_a_row_shows_the_fraction_of_peak():
    peak = measure.find_peak("NVIDIA H100 80GB HBM3")
    fig = measure.Figure("matmul_bf16_8192", 797.0, "TFLOP/s", "tflops:bf16", "8192³ bf16 matmul")
    assert measure.describe_row(fig, peak).startswith(
        "matmul_bf16_8192: 797 TFLOP/s = 81% of peak (989.4 TFLOP/s)"
    )
    link = measure.Figure("h2d", 55.0, "GB/s", "host_link")
    assert "87% of peak (63 GB/s)" in measure.describe_row(link, peak)


def test_merge_replaces_a_figure_of_the_same_device_and_keeps_the_rest(tmp_path):
    path = tmp_path / "recorded.json"
    base = {"unit": "x", "torch": "2.11", "date": "2026-11-01"}
    path.write_text(json.dumps([
        {**base, "figure": "a", "value": 1, "device": "H100"},
        {**base, "figure": "a", "value": 2, "device": "A100"},
        {**base, "figure": "b", "value": 3, "device": "H100"},
    ]))  # fmt: skip
    measure.merge(path, [{**base, "figure": "a", "value": 9, "device": "H100"}])
    got = {(r["figure"], r["device"]): r["value"] for r in json.loads(path.read_text())}
    assert got == {("a", "H100"): 9, ("a", "A100"): 2, ("b", "H100"): 3}


def test_unknown_figure_groups_are_refused_with_the_list():
    with pytest.raises(ValueError, match="choose from"):
        measure.measure(["nope"])


def test_every_figure_the_notebooks_look_up_is_measured_by_some_group():
    import inspect
    import re

    produced = set(re.findall(r'Figure\(\s*"([A-Za-z0-9_]+)"', inspect.getsource(measure)))
    produced |= {f"amp_resnet18_step_{k}_ms" for k in ("fp32", "tf32", "fp16", "bf16")}
    looked_up = set()
    for aid in course.assignments():
        for cell in course.read(course.source_path(aid)).cells:
            looked_up |= set(re.findall(r'describe\(\s*"([A-Za-z0-9_]+)"', cell.source))
    assert looked_up <= produced, sorted(looked_up - produced)


@pytest.mark.skipif(GPU, reason="the CPU behaviour")
@pytest.mark.slow  # runs `python -m grader measure`
def test_without_a_gpu_it_measures_the_cpu_lists_gpu_figures_and_exits_zero(tmp_path):
    before = recorded.RECORDED_FILE.read_bytes() if recorded.RECORDED_FILE.is_file() else None
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "measure"], capture_output=True, text=True,
        cwd=course.REPO, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Need a CUDA GPU, not measured here:" in proc.stdout
    for name, _, _ in measure.GPU_FIGURES:
        assert f"  {name}: " in proc.stdout
    assert "cpu_matmul_fp32_1024:" in proc.stdout and "Nothing written" in proc.stdout
    after = recorded.RECORDED_FILE.read_bytes() if recorded.RECORDED_FILE.is_file() else None
    assert after == before
    out = tmp_path / "cpu.json"
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "measure", "--out", str(out)], capture_output=True,
        text=True, cwd=course.REPO, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    recs = json.loads(out.read_text())
    assert {r["figure"] for r in recs} == {"cpu_matmul_fp32_1024", "cpu_small_op_us"}
    assert all(r["device"] == "CPU" and r["value"] > 0 and r["date"] for r in recs)


@pytest.mark.cuda
def test_on_a_gpu_two_groups_measure_real_figures(tmp_path):
    figures, skipped = measure.measure(["d2d", "launch"], plots=tmp_path)  # not images/
    assert not skipped
    values = {f.figure: f.value for f in figures}
    assert values["d2d_copy_bandwidth"] > 50  # GB/s: any datacenter GPU copies far faster
    assert values["cuda_graph_small_ops_speedup"] > 1


def test_a_gpu_run_keeps_each_group_as_it_finishes_and_survives_a_failing_one(
    tmp_path, monkeypatch, capsys
):
    """On a lent GPU a run may be stopped at the machine's time limit or one group may fail:
    the figures of every group that finished must already be in the records file."""
    out = tmp_path / "recorded.json"

    def first():
        return [measure.Figure("first_figure", 1.0, "x")]

    def broken():
        raise RuntimeError("CUDA error: out of memory")

    def last():
        kept = {r["figure"] for r in json.loads(out.read_text())}
        assert kept == {"first_figure"}  # written before the next group started
        return [measure.Figure("last_figure", 2.0, "x")]

    groups = [("first", "", first), ("broken", "", broken), ("last", "", last)]
    monkeypatch.setattr(measure, "GPU_FIGURES", groups)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    assert measure.main(None, out) == 1
    assert {r["figure"] for r in json.loads(out.read_text())} == {"first_figure", "last_figure"}
    printed = capsys.readouterr()
    assert "broken: RuntimeError: CUDA error: out of memory" in printed.out
    assert "Traceback" in printed.err
    with pytest.raises(RuntimeError):  # without a callback the failure propagates
        measure.measure(["broken"])
