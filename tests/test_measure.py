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


# --------------------------------------------------------------------------- 12_triton's group
TRITON_FIGURES = {
    "triton_bias_gelu_vs_torch": ("x", None),
    "triton_softmax_bandwidth": ("GB/s", "memory"),
    "triton_matmul_tflops": ("TFLOP/s", "tflops:fp16"),
}


class _TorchKernels:
    """Stands in for 12_triton's reference (solutions/12_triton) on the CPU: the same contract
    (bias_gelu, softmax_rows, matmul), computed by torch."""

    @staticmethod
    def bias_gelu(x, bias):
        return torch.nn.functional.gelu(x + bias, approximate="tanh")

    @staticmethod
    def softmax_rows(x):
        return torch.softmax(x, -1)

    @staticmethod
    def matmul(a, b):
        return (a.float() @ b.float()).to(a.dtype)


@pytest.fixture
def small_triton_group(monkeypatch):
    """The triton group on the CPU at toy sizes with torch's kernels (no timing rule changed:
    median_ms still warms up and takes the median; it is only made short)."""
    monkeypatch.setattr(measure, "TRITON_BIAS_GELU_SHAPE", (64, 48))
    monkeypatch.setattr(measure, "TRITON_SOFTMAX_ROWS", 16)
    monkeypatch.setattr(measure, "TRITON_SOFTMAX_N", (32, 100))
    monkeypatch.setattr(measure, "TRITON_MATMUL_N", 32)
    monkeypatch.setattr(measure, "_triton_reference", lambda: _TorchKernels)
    fast = measure.median_ms
    monkeypatch.setattr(measure, "median_ms", lambda fn, **kw: fast(fn, min_run_time=0.01))


def test_the_triton_group_is_listed_with_its_figures_units_and_peaks():
    import inspect
    import re

    groups = {name: fn for name, _, fn in measure.GPU_FIGURES}
    assert "triton" in groups
    source = inspect.getsource(groups["triton"])
    assert set(re.findall(r'Figure\(\s*"([A-Za-z0-9_]+)"', source)) == set(TRITON_FIGURES)
    h100 = measure.find_peak("NVIDIA H100 80GB HBM3")
    for unit, peak in TRITON_FIGURES.values():
        assert unit in ("x", "GB/s", "TFLOP/s")  # Figure's units
        assert peak is None or measure.peak_value(h100, peak) is not None, peak
    assert max(measure.TRITON_SOFTMAX_N) <= 4096  # softmax_rows's contract: a row in one block
    # the reference is the course's, loaded as the checks load it: no copy of the kernels here
    assert 'reference("12_triton")' in inspect.getsource(measure._triton_reference)
    assert "@triton.jit" not in inspect.getsource(measure)


def test_the_triton_group_measures_its_three_figures_and_records_round_trip(
    small_triton_group, tmp_path, monkeypatch
):
    measure._PLOTS_OVERRIDE.append(tmp_path)
    try:
        figures = measure._triton(device="cpu")
    finally:
        measure._PLOTS_OVERRIDE.pop()
    got = {f.figure: f for f in figures}
    assert set(got) == set(TRITON_FIGURES)
    for name, (unit, peak) in TRITON_FIGURES.items():
        assert got[name].unit == unit and got[name].peak == peak and got[name].value > 0
    assert got["triton_matmul_tflops"].extra["cublas_tflops"] > 0
    assert "cuBLAS" in got["triton_matmul_tflops"].note
    softmax = got["triton_softmax_bandwidth"].extra
    assert softmax["n"] == [32, 100] and len(softmax["torch_gb_s"]) == 2
    assert (tmp_path / "triton_softmax_bandwidth.png").is_file()
    # as `measure` records them on a GPU, and as the notebook reads them back
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    out = tmp_path / "recorded.json"
    measure.merge(out, measure.records(figures))
    monkeypatch.setattr(recorded, "RECORDED_FILE", out)
    softmax_rec = recorded.lookup("triton_softmax_bandwidth")
    assert softmax_rec["peak"] == 3350.0 and softmax_rec["fraction_of_peak"] > 0
    assert recorded.lookup("triton_matmul_tflops")["peak"] == 989.4
    assert "fraction_of_peak" not in recorded.lookup("triton_bias_gelu_vs_torch")
    text = recorded.describe("triton_matmul_tflops", "the Triton matmul")
    assert text.startswith("Recorded on a real GPU: the Triton matmul = ") and "cuBLAS" in text


def test_a_failing_triton_kernel_keeps_the_other_figures_and_says_why(
    small_triton_group, tmp_path, monkeypatch
):
    class Broken(_TorchKernels):
        @staticmethod
        def softmax_rows(x):  # the unstable / wrong one: never timed
            return torch.exp(x) / 2

        @staticmethod
        def matmul(a, b):
            raise RuntimeError("CompilationError: at 12:8: incompatible types")

    monkeypatch.setattr(measure, "_triton_reference", lambda: Broken)
    with pytest.raises(measure.GroupFailed) as failed:
        measure._triton(device="cpu")
    assert [f.figure for f in failed.value.figures] == ["triton_bias_gelu_vs_torch"]
    assert "softmax_rows: AssertionError: softmax_rows at N = 32: relative error" in str(
        failed.value
    )
    assert "matmul: RuntimeError: CompilationError" in str(failed.value)
    assert isinstance(failed.value.__cause__, AssertionError)


def test_a_group_that_fails_part_way_keeps_what_it_measured(tmp_path, monkeypatch, capsys):
    out = tmp_path / "recorded.json"

    def partial():
        kept = [measure.Figure("triton_bias_gelu_vs_torch", 2.0, "x")]
        raise measure.GroupFailed("matmul: CompilationError: ...", kept)

    monkeypatch.setattr(measure, "GPU_FIGURES", [("triton", "", partial)])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    assert measure.main(None, out) == 1
    assert [r["figure"] for r in json.loads(out.read_text())] == ["triton_bias_gelu_vs_torch"]
    assert "triton: GroupFailed: matmul: CompilationError" in capsys.readouterr().out


def test_the_triton_group_refuses_to_time_interpreted_kernels(monkeypatch):
    from grader.runtime import triton_cpu

    pytest.importorskip("triton")
    monkeypatch.setattr(triton_cpu, "interpreter_on", lambda: True)
    with pytest.raises(RuntimeError, match="interpreter is on"):
        measure._triton_reference()
