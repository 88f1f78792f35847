"""10_profiling: the trace parser reads real Kineto traces and the simulated GPU's alike; the
checks accept the reference and written-differently answers and reject every listed mistake."""

import inspect
import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from grader.checks import ch10_profiling as checks
from grader.checks.common import CheckFailed
from grader.runtime import trace as tracing
from grader.runtime.simulate import simulated_cuda

from .helpers import assert_sample_scores_as_declared, reference_fn, run_every_check, sample_params

A = "10_profiling"
NAMES = [
    "arithmetic_intensity",
    "predict_bound",
    "train_without_syncs",
    "fused_step",
    "overlapped_pipeline",
]


@pytest.mark.parametrize(
    "name, signature",
    [
        (
            "arithmetic_intensity",
            "(op: str, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> float",
        ),
        (
            "predict_bound",
            "(op: str, shape: tuple[int, ...], dtype: torch.dtype, gpu: str) -> str",
        ),
        ("train_without_syncs", "(model, batches, optimizer) -> torch.Tensor"),
        ("fused_step", "(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor"),
        (
            "overlapped_pipeline",
            "(model, batches: list[torch.Tensor], device) -> torch.Tensor",
        ),
    ],
)
def test_reference_has_the_documented_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize("name", NAMES)
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


def _cpu_kineto_trace(tmp_path):
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function(checks.WINDOW):
            checks.unfused_step(*checks.fused_inputs())
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return path


def test_parser_reads_a_real_kineto_trace(tmp_path):
    path = _cpu_kineto_trace(tmp_path)
    for source in (path, json.loads(path.read_text()), json.loads(path.read_text())["traceEvents"]):
        trace = tracing.parse(source).within(checks.WINDOW)
        names = {e.name for e in trace.cpu_ops}
        assert {"aten::mul", "aten::tanh", "aten::pow"} <= names
        assert trace.kernels == [] and trace.syncs == [] and trace.launch_count == 0


def test_simulated_trace_has_the_kineto_format():
    with simulated_cuda(kernels=True, virtual_time=True, allow_real_gpu=True) as sim:
        x = torch.randn(4, 4).to("cuda")
        with record_function("r"):
            y = (x * 2).sum()
            y.item()
        events = sim.chrome_trace()
    assert all(e["ph"] == "X" and {"ts", "dur", "cat", "name", "args"} <= set(e) for e in events)
    cats = {e["cat"] for e in events}
    assert {"kernel", "gpu_memcpy", "cuda_runtime", "cpu_op", "user_annotation"} <= cats
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert all(e["args"]["stream"] == 7 for e in kernels)
    launches = {e["args"]["correlation"] for e in events if e["name"] == "cudaLaunchKernel"}
    assert {e["args"]["correlation"] for e in kernels} == launches
    trace = tracing.parse(events).within("r")
    assert trace.launch_count == 2 and [e.name for e in trace.syncs] == ["cudaStreamSynchronize"]


def test_overlap_fraction_of_hand_made_events():
    def ev(cat, name, ts, dur, stream):
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "ts": ts,
            "dur": dur,
            "args": {"stream": stream},
        }

    events = [
        ev("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 0, 10, 8),
        ev("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 10, 10, 8),
        ev("kernel", "gemm", 5, 10, 7),
        ev("kernel", "on the copy stream", 10, 10, 8),
    ]
    assert tracing.parse(events).overlap_fraction() == pytest.approx(0.5)
    for e in events:  # streams given only as the GPU lane (tid), as some exports do
        e["tid"] = e.pop("args")["stream"]
    assert tracing.parse(events).overlap_fraction() == pytest.approx(0.5)
    assert tracing.parse({"traceEvents": []}).overlap_fraction() == 0.0


def test_compiled_step_is_counted_op_by_op_on_the_simulated_gpu_and_told_so():
    def hand_chain(x, w, b):
        return checks.unfused_step(x, w, b)

    with pytest.raises(CheckFailed, match="fused operators"):
        checks.check_fused_step(hand_chain)


def test_unknown_op_must_raise_value_error():
    ref = reference_fn(A, "arithmetic_intensity")

    def no_error(op, shape, dtype=torch.float32):
        return ref(op, shape, dtype) if op != "conv3d" else 1.0

    with pytest.raises(CheckFailed, match="ValueError"):
        checks.check_arithmetic_intensity(no_error)


def test_roofline_fraction_of_a_simulated_matmul():
    from grader.runtime import simulate

    m = k = n = 512
    with simulated_cuda(kernels=True, virtual_time=True, allow_real_gpu=True) as sim:
        a, b = torch.randn(m, k).to("cuda"), torch.randn(k, n).to("cuda")
        a @ b
        trace = tracing.parse(sim.chrome_trace())
    flops, nbytes = 2 * m * k * n, (m * k + k * n + m * n) * 4
    fraction = trace.roofline_fraction(
        "mm", flops, nbytes, simulate.SIM_MATMUL_TFLOPS[torch.float32], simulate.SIM_HBM_GBPS
    )
    ideal = flops / (simulate.SIM_MATMUL_TFLOPS[torch.float32] * 1e12)
    assert fraction == pytest.approx(ideal / (ideal + simulate.SIM_KERNEL_MIN_S), rel=1e-3)
    with pytest.raises(ValueError, match="no kernel"):
        trace.roofline_fraction("conv", flops, nbytes, 1.0, 1.0)


@pytest.mark.parametrize(
    "read",
    [
        lambda t, m: t.sum().item(),
        lambda t, m: print(t),
        lambda t, m: bool(t.sum() > 0),
        lambda t, m: t[m],
        lambda t, m: t.cpu(),
        lambda t, m: t.tolist(),
        lambda t, m: torch.tensor([t.sum(), t.mean()]),
        lambda t, m: torch.nonzero(m),
    ],
    ids=["item", "print", "bool", "mask", "cpu", "tolist", "tensor_of_list", "nonzero"],
)
def test_every_host_read_is_one_sync_in_the_simulated_trace(read, capsys):
    with simulated_cuda(kernels=True, virtual_time=True, allow_real_gpu=True) as sim:
        t = torch.randn(4).to("cuda")
        mask = (t > 0).to("cuda")
        host = torch.randn(4)
        with record_function("r"):
            (host * 2).sum().item()  # host tensors: neither kernels nor syncs
            read(t, mask)
        trace = tracing.parse(sim.chrome_trace()).within("r")
    assert len(trace.syncs) == 1, trace.summary()


def test_a_write_through_a_view_puts_the_base_on_the_device():
    with simulated_cuda(kernels=True, virtual_time=True, allow_real_gpu=True) as sim:
        out = torch.zeros(3)
        v = torch.ones(()).to("cuda")
        out[1] = v * 2
        assert out in sim.on_device
        assert torch.equal(out, torch.tensor([0.0, 2.0, 0.0]))


def _host(cat, name, ts, dur):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {}}


def test_a_stream_wait_event_is_not_a_host_synchronization():
    # Kineto's cuda_sync events (experimental_config enable_cuda_sync_events): in "Stream Wait
    # Event" (cudaStreamWaitEvent, what wait_stream records) a stream waits and the host goes on.
    events = [
        _host("cuda_sync", "Stream Wait Event", 0, 1),
        _host("cuda_sync", "Stream Sync", 5, 3),
        _host("cuda_runtime", "cudaStreamWaitEvent", 10, 2),
    ]
    assert [e.name for e in tracing.parse(events).syncs] == ["Stream Sync"]


def test_a_driver_launch_inside_a_runtime_launch_counts_once():
    # Should CUPTI report the driver call a runtime launch makes, it is the same launch; a
    # driver launch of its own (Triton's cuLaunchKernel, cuBLASLt's cuLaunchKernelEx) counts.
    events = [
        _host("cuda_runtime", "cudaLaunchKernel", 0, 10),
        _host("cuda_driver", "cuLaunchKernel", 2, 5),
        _host("cuda_driver", "cuLaunchKernelEx", 20, 4),
        _host("cuda_runtime", "cudaGraphLaunch", 30, 6),
    ]
    trace = tracing.parse(events)
    assert trace.launch_count == 3
    assert [e.name for e in trace.launches] == [
        "cudaLaunchKernel",
        "cuLaunchKernelEx",
        "cudaGraphLaunch",
    ]
