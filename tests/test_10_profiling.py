"""10_profiling: the trace parser reads real Kineto traces and the simulated GPU's alike; the
checks accept the reference and written-differently answers and reject every listed mistake."""

import inspect
import json
import math

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from grader.checks import ch10_profiling as checks
from grader.checks.common import CheckFailed
from grader.runtime import trace as tracing
from grader.runtime.simulate import simulated_cuda

from .helpers import (
    answer_fn,
    assert_sample_scores_as_declared,
    exercise_params,
    reference_fn,
    run_every_check,
    sample_params,
)

A = "10_profiling"
NAMES = [
    "arithmetic_intensity",
    "predict_bound",
    "train_without_syncs",
    "fused_step",
    "overlapped_pipeline",
    "temporal_breakdown",
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
        ("temporal_breakdown", "(events: list[dict]) -> dict[str, float]"),
    ],
)
def test_reference_has_the_documented_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize("name", exercise_params(A, NAMES))
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


def test_an_eager_chain_is_counted_op_by_op_and_told_to_fuse():
    def hand_chain(x, w, b):
        return checks.unfused_step(x, w, b)

    with pytest.raises(CheckFailed, match="fused operators.*torch.compile"):
        checks.check_fused_step(hand_chain)


def _cpu_event(name, ts, dur):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "args": {}}


def test_cpu_kernels_are_generated_kernels_and_top_level_operators_that_do_work():
    events = [
        _cpu_event("Torch-Compiled Region: 0/0", 0, 100),
        _cpu_event("## Call CompiledFxGraph abc ##", 1, 98),
        _cpu_event("aten::addmm", 2, 40),
        _cpu_event("aten::expand", 3, 1),  # inside addmm
        _cpu_event("aten::copy_", 5, 2),  # inside addmm
        _cpu_event("graph_0_cpp_fused_add_mul_pow_tanh_0", 50, 40),
        _cpu_event("aten::t", 120, 1),  # a view: no kernel
        _cpu_event("aten::empty_strided", 122, 1),  # an allocation: no kernel
        _cpu_event("aten::mul", 125, 5),  # an eager operator after the compiled graph
    ]
    trace = tracing.parse(events)
    assert [e.name for e in trace.cpu_kernels] == [
        "aten::addmm",
        "graph_0_cpp_fused_add_mul_pow_tanh_0",
        "aten::mul",
    ]
    assert len(trace.compiled_regions) == 1


def test_a_compiled_unfused_step_is_judged_by_inductors_kernels_on_the_cpu():
    compiled = torch.compile(checks.unfused_step)
    seen = checks._probe_fused_compiled(compiled)
    assert seen is not None and seen["compiled"]
    kernels = [e.name for e in tracing.parse(seen["events"]).within(checks.WINDOW).cpu_kernels]
    assert len(kernels) == 2 and "aten::addmm" in kernels, kernels
    assert any("cpp_fused" in k for k in kernels), kernels
    assert checks._probe_fused_compiled(reference_fn(A, "fused_step")) is None  # eager


@pytest.mark.parametrize(
    "softmax, layer_norm, ok",
    [
        (3.0, 3.0, True),
        (10.0, 10.0, True),
        (4.5, 7.25, True),
        (5.0, 2.9, False),
        (5.0, 10.1, False),
        (11.0, 8.0, False),
        (5.0, 12.0, False),  # inside the old 2x band around the reference's 8
    ],
)
def test_softmax_and_layer_norm_are_held_to_the_stated_range(softmax, layer_norm, ok):
    ref = reference_fn(A, "arithmetic_intensity")
    flops = {"softmax": softmax, "layer_norm": layer_norm}

    def counted(op, shape, dtype=torch.float32):
        if op in flops:
            return flops[op] / (2 * dtype.itemsize)
        return ref(op, shape, dtype)

    if ok:
        checks.check_arithmetic_intensity(counted)
    else:
        with pytest.raises(CheckFailed, match="3 to 10 FLOPs per element"):
            checks.check_arithmetic_intensity(counted)


def test_every_gpu_and_dtype_the_cases_use_has_a_figure_and_float32_is_plain_fp32():
    for _, _, dtype, gpu in checks.BOUND_CASES:
        assert checks.GPUS[gpu].tflops[checks.DTYPE_KEYS[dtype]] is not None
    for spec in checks.GPUS.values():  # CUDA-core FP32, below every Tensor Core figure
        assert spec.tflops["fp32"] < spec.tflops["fp16"]
    assert checks.GPUS["T4"].tflops["bf16"] is None


def test_cases_close_to_the_ridge_tell_the_units_apart():
    """GiB/s for GB/s, 2^40 for 10^12, TF32 for float32 and a ridge rounded down to a whole
    FLOP/byte each flip at least one verdict; no case lies within 1 % of its ridge but the last
    (0.003 %), and none within 10^-6 (where floating point, not the rule, would decide)."""
    ref = reference_fn(A, "arithmetic_intensity")

    def verdicts(scale_fp32=1.0, scale_16=1.0, floor=False):
        out = []
        for op, shape, dtype, gpu in checks.BOUND_CASES:
            ridge = checks.GPUS[gpu].ridge(dtype)
            ridge *= scale_fp32 if dtype == torch.float32 else scale_16
            ridge = math.floor(ridge) if floor else ridge
            out.append("compute" if ref(op, shape, dtype) >= ridge else "memory")
        return out

    right = verdicts()
    assert verdicts(1e9 / 2**30, 1e9 / 2**30) != right  # bandwidth in GiB/s
    assert verdicts(2**40 / 1e12, 2**40 / 1e12) != right  # peak in 2^40 FLOP/s
    assert verdicts(494.7 / 66.9) != right  # float32 on the H100's TF32 Tensor Cores
    assert verdicts(floor=True) != right  # 989.4e12 // 3350e9
    *far, last = checks.BOUND_CASES
    for op, shape, dtype, gpu in far:
        assert abs(ref(op, shape, dtype) / checks.GPUS[gpu].ridge(dtype) - 1) > 0.01
    op, shape, dtype, gpu = last
    assert abs(ref(op, shape, dtype) / checks.GPUS[gpu].ridge(dtype) - 1) > 1e-6


def test_the_roofline_of_a_gpu_without_the_dtype_says_which_peak_it_draws():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    checks.plot_roofline(ax, {"add": 0.1}, dtype_key="bf16")
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)
    assert any(label.startswith("T4 (fp16: no bf16)") for label in labels), labels


def _no_record_stream_pipeline():
    return answer_fn(A, "wrong_pipeline_no_record_stream", "overlapped_pipeline")


def test_without_record_stream_the_copy_bound_case_alone_shows_no_race():
    """The hole the compute-bound case closes: in the copy-bound case the freed batch is reused
    after its last reader finished, so only the compute-bound case catches the missing
    record_stream."""
    seen = checks._probe_pipeline_simulated(_no_record_stream_pipeline())
    assert seen["race"] is None
    memory = checks._probe_pipeline_memory(_no_record_stream_pipeline())
    assert memory["kind"] == "reuse_while_read"


def test_a_launch_bound_loop_without_record_stream_still_reuses_memory_too_early():
    """Extra host work per batch (60 small launches on a scratch tensor) makes the loop
    launch-bound; the compute-bound GPU still reads each batch when its memory is reused."""
    pipeline = _no_record_stream_pipeline()

    def launch_bound(model, batches, device):
        scratch = torch.zeros(8, device=device)

        class Busy(torch.nn.Module):
            def forward(self, x):
                for _ in range(60):
                    scratch.add_(1.0)
                return model(x)

        return pipeline(Busy(), batches, device)

    memory = checks._probe_pipeline_memory(launch_bound)
    assert memory["kind"] == "reuse_while_read", memory
    reference = reference_fn(A, "overlapped_pipeline")
    assert checks._probe_pipeline_memory(reference)["race"] is None


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


def test_the_attention_score_matmul_is_memory_bound_on_every_gpu():
    """Section 1 says so: QK^T of the block (width 1024, 16 heads: head dim 64, 2048 tokens,
    bf16) has an intensity of about 60 FLOP/byte, left of every GPU's bf16 (or fp16) ridge."""
    d, t, heads = 1024, 2048, 16
    dh = d // heads
    intensity = (2 * heads * t * t * dh) / ((2 * t * d + heads * t * t) * 2)
    assert 55 < intensity < 65
    for gpu in checks.GPUS.values():
        dtype = torch.bfloat16 if gpu.tflops["bf16"] else torch.float16
        assert intensity < gpu.ridge(dtype), gpu.name


# --------------------------------------------------------------------------- the real-GPU pipeline
#: The real-GPU pipeline's balance played on the simulated GPU. On an H200 one batch of
#: CUDA_PIPELINE computes in about 2.7 ms (2 x 2 x 1024 x 4096 x 8192 FLOP at the recorded
#: 50.8 TFLOP/s fp32) and copies in about 0.33 ms (16.8 MB at the recorded 51.6 GB/s pinned):
#: compute ~8x copy. The simulated pipeline of the exercise (make_pipeline()) computes in about
#: its copy time, so its kernels are made 8 times slower.
REAL_GPU_BALANCE = 8.0


def _sim_cuda_probe(stalls_ms=()):
    """A stand-in for the check's real-GPU probe on the simulated GPU, balanced like the real
    pipeline: the ``k``-th run (from 0) holds the host for ``stalls_ms[k]`` ms just before the
    model's first kernel (a preempted process on a loaded machine)."""
    runs = []

    def probe(overlapped_pipeline):
        stall_s = (list(stalls_ms)[len(runs)] if len(runs) < len(stalls_ms) else 0.0) / 1000
        runs.append(stall_s)
        model, batches = checks.make_pipeline()
        with simulated_cuda(
            kernels=True, virtual_time=True, allow_real_gpu=True,
            h2d_gbps=checks.PIPELINE_H2D_GBPS, kernel_time_scale=REAL_GPU_BALANCE,
        ) as sim:  # fmt: skip
            model.to("cuda")
            batches = [x.pin_memory() for x in batches]  # as the real probe does
            first = []

            def hold_the_host(module, args):
                if not first:
                    first.append(True)
                    sim.sleep_until(sim.now() + stall_s)

            model.register_forward_pre_hook(hold_the_host)
            with torch.no_grad(), record_function(checks.WINDOW):
                out = overlapped_pipeline(model, batches, torch.device("cuda:0"))
            sim.synchronize()
            events = sim.chrome_trace()
            on_device = out in sim.on_device
        return checks._traced(events, out, on_device=on_device)

    probe.runs = runs
    return probe


class _InThisProcess:
    """A channel that runs a probe here as it is (a test's closure cannot travel by name)."""

    def request(self, fn, target, args, kwargs):
        return fn(target.obj, *args, **kwargs)


def _pipeline_handle(overlapped_pipeline):
    from grader.runtime import remote

    return remote.Handle("overlapped_pipeline", overlapped_pipeline, via=_InThisProcess())


@pytest.fixture
def sim_cuda_check(monkeypatch):
    """check_overlapped_pipeline_cuda on this machine, its probe played by :func:`_sim_cuda_probe`
    (pass the answer through :func:`_pipeline_handle`)."""
    from grader.runtime import remote

    monkeypatch.setattr(remote, "_require_probe", lambda fn: None)

    def install(stalls_ms=()):
        probe = _sim_cuda_probe(stalls_ms)
        monkeypatch.setattr(checks, "cuda_or_not_checked", lambda what: True)
        monkeypatch.setattr(checks, "_probe_pipeline_cuda", probe)
        monkeypatch.setattr(checks, "_expected_pipeline_cuda", checks._expected_pipeline)
        monkeypatch.setattr(checks.time, "sleep", lambda s: None)
        return probe

    return install


def _pipeline_samples():
    from grader.tools import samples

    return [
        pytest.param(s, id=s.name)
        for s in samples.load_samples(A)
        if "overlapped_pipeline" in s.cells
        and "test_overlapped_pipeline_cuda" not in s.may_fail_on_gpu
    ]


@pytest.mark.parametrize("sample", _pipeline_samples())
def test_each_pipeline_samples_cuda_cell_scores_as_declared_on_a_gpu_balanced_like_the_real_one(
    sample, sim_cuda_check
):
    """The pipeline samples' CUDA cells where the compute per batch is about 8x its copy, as on
    an H200. wrong_pipeline_synchronize_each_batch was declared to fail there, and an H200 run
    disagreed: its host waits each batch, but only after issuing the next copy, which then runs
    beside the previous batch's kernels (far longer than a copy): 6 of its 8 copies hidden."""
    sim_cuda_check()
    namespace: dict = {}
    exec(sample.cells["overlapped_pipeline"], namespace)  # noqa: S102 - the course's own sample
    answer = _pipeline_handle(namespace["overlapped_pipeline"])
    if "test_overlapped_pipeline_cuda" in sample.expected_failures(gpu=True):
        with pytest.raises(CheckFailed):
            checks.check_overlapped_pipeline_cuda(answer)
    else:
        checks.check_overlapped_pipeline_cuda(answer)


def test_a_host_stall_before_the_first_kernel_costs_a_run_not_the_points(sim_cuda_check, capsys):
    """correct_pipeline_events issues all eight copies before its first kernel: a host held
    there longer than the copies take leaves them unhidden in that run (0.3 ms here, all the
    copies' time; 2.6 ms on an H200). The check runs again and the best run counts. The
    reference issues one copy ahead, so the same stall costs it one copy."""
    events = _pipeline_handle(answer_fn(A, "correct_pipeline_events", "overlapped_pipeline"))
    probe = sim_cuda_check(stalls_ms=[0.3])
    checks.check_overlapped_pipeline_cuda(events)
    assert len(probe.runs) == 2 and "OK:" in capsys.readouterr().out
    probe = sim_cuda_check(stalls_ms=[0.3] * checks.CUDA_PIPELINE_RUNS)
    with pytest.raises(CheckFailed) as info:
        checks.check_overlapped_pipeline_cuda(events)
    assert f"in {checks.CUDA_PIPELINE_RUNS} runs" in str(info.value)
    probe = sim_cuda_check(stalls_ms=[0.3])
    checks.check_overlapped_pipeline_cuda(_pipeline_handle(reference_fn(A, "overlapped_pipeline")))
    assert len(probe.runs) == 1


def test_every_run_of_the_real_gpu_pipeline_must_give_the_right_outputs(sim_cuda_check):
    """Repeating a run for its overlap never forgives wrong outputs: a race that shows in one
    run of several fails."""
    events = answer_fn(A, "correct_pipeline_events", "overlapped_pipeline")
    calls = []

    def wrong_in_the_second_run(model, batches, device):
        calls.append(1)
        out = events(model, batches, device)
        return out + 1 if len(calls) == 2 else out

    sim_cuda_check(stalls_ms=[0.3] * checks.CUDA_PIPELINE_RUNS)  # no run overlaps enough
    with pytest.raises(CheckFailed) as info:
        checks.check_overlapped_pipeline_cuda(_pipeline_handle(wrong_in_the_second_run))
    assert "model(batch) for every batch" in str(info.value) and len(calls) == 2


def test_bottleneck_section_matches_the_torch_it_runs_on(capsys):
    """10 says torch.utils.bottleneck is gone from the course's torch (2.11, 2.14) and shows
    cProfile instead: the module must be absent here, and the cell must run and say so."""
    import importlib.util

    from grader.runtime import course

    assert importlib.util.find_spec("torch.utils.bottleneck") is None, "10's text is out of date"
    cells = {c.get("id"): c.source for c in course.read(course.source_path(A)).cells}
    assert "github.com/pytorch/pytorch/issues/68742" in cells["md-10b"]
    namespace = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional}
    exec(compile(cells["code-10c"], "code-10c", "exec"), namespace)
    out = capsys.readouterr().out
    assert "torch.utils.bottleneck in this torch: False" in out
    assert "run_backward" in out  # cProfile sees the backward pass as one Python-level call


# --------------------------------------------------------------------------- temporal_breakdown
def _raw(name):
    """The trace's events read here, independently of the checks' cache."""
    import gzip

    from grader.runtime.course import TRACES

    with gzip.open(TRACES / f"{name}.json.gz", "rt") as f:
        return json.load(f)["traceEvents"]


def _covered_ns(intervals):
    """Length of the union of integer intervals by a sweep over their endpoints (exact)."""
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    total, running, previous = 0, 0, None
    for t, change in points:
        if running > 0:
            total += t - previous
        running += change
        previous = t
    return total


def _independent_breakdown(events):
    """The breakdown recomputed in integer nanoseconds (the traces' times have at most 3
    decimals of a microsecond), by another method than the reference's."""
    gpu = [
        e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in {"kernel", "gpu_memcpy", "gpu_memset"}
    ]
    ns = [(round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in gpu]
    compute = [
        iv for iv, e in zip(ns, gpu) if e["cat"] == "kernel" and "nccl" not in e["name"].lower()
    ]
    span = max(e for _, e in ns) - min(s for s, _ in ns)
    busy, comp = _covered_ns(ns), _covered_ns(compute)
    return {
        "span_us": span / 1000,
        "busy_us": busy / 1000,
        "idle_us": (span - busy) / 1000,
        "compute_us": comp / 1000,
        "non_compute_us": (busy - comp) / 1000,
    }


@pytest.mark.parametrize("name", checks.real_trace_names())
def test_temporal_breakdown_of_every_real_trace_agrees_with_an_independent_count(name):
    events = _raw(name)
    mine = reference_fn(A, "temporal_breakdown")(events)
    other = _independent_breakdown(events)
    # times rounded to whole ns here: at most 1 ns per GPU event apart (a float64 timestamp of
    # 4.5e12 us, the DDP trace's clock, is itself exact to 1 ns only)
    n = sum(e.get("ph") == "X" and e.get("cat") in checks.BREAKDOWN_GPU_CATS for e in events)
    for key in checks.BREAKDOWN_KEYS:
        assert mine[key] == pytest.approx(other[key], rel=1e-9, abs=1e-3 * n), key
    assert 0 < mine["busy_us"] <= mine["span_us"]
    assert mine["compute_us"] + mine["non_compute_us"] == pytest.approx(mine["busy_us"])
    assert mine["idle_us"] == pytest.approx(mine["span_us"] - mine["busy_us"])


def test_facts_of_a100_simple_add_that_the_exercise_states():
    events = _raw("a100_simple_add")
    xs = [e for e in events if e.get("ph") == "X"]
    count = {c: sum(e["cat"] == c for e in xs) for c in ("kernel", "gpu_memcpy", "gpu_memset")}
    assert count == {"kernel": 79, "gpu_memcpy": 16, "gpu_memset": 3}
    syncs = [e for e in xs if e["cat"] == "cuda_sync"]
    assert len(syncs) == 41 and all("stream" in e["args"] for e in syncs)  # not GPU work
    b = reference_fn(A, "temporal_breakdown")(events)
    assert not any("nccl" in e["name"].lower() for e in xs)
    # no communication: the non-compute time is the copies' and memsets' time alone
    copies = [(e["ts"], e["ts"] + e["dur"]) for e in xs if e["cat"] in ("gpu_memcpy", "gpu_memset")]
    assert b["non_compute_us"] > 0 and b["non_compute_us"] <= _covered_ns(copies)
    # HTA 0.5.0 takes the cuda_sync records as GPU events: its span runs 0.44 s further, to the
    # end of the last Context Sync record (the exercise's text says so)
    with_syncs = max(e["ts"] + e["dur"] for e in syncs + [e for e in xs if e["cat"] == "kernel"])
    last_gpu = max(e["ts"] + e["dur"] for e in xs if e["cat"] in checks.BREAKDOWN_GPU_CATS)
    assert (with_syncs - last_gpu) / 1e6 == pytest.approx(0.44, abs=0.005)
    assert max(syncs, key=lambda e: e["ts"] + e["dur"])["name"] == "Context Sync"


def test_facts_of_the_ddp_rank_that_the_exercise_states():
    events = _raw(checks.DDP_TRACE)
    xs = [e for e in events if e.get("ph") == "X"]
    gpu = [e for e in xs if e["cat"] in checks.BREAKDOWN_GPU_CATS]
    nccl = [e for e in gpu if e["cat"] == "kernel" and "nccl" in e["name"].lower()]
    assert len(nccl) == 21 and {e["args"]["stream"] for e in nccl} == {40}
    b = reference_fn(A, "temporal_breakdown")(events)
    # NCCL time that no compute kernel covers, counted here: part of the non-compute time
    compute = [
        (round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000))
        for e in gpu
        if e["cat"] == "kernel" and e not in nccl
    ]
    comm = [(round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in nccl]
    exposed_ns = _covered_ns(comm + compute) - _covered_ns(compute)
    assert 0 < exposed_ns / 1000 <= b["non_compute_us"] + 1e-3
    # the GPU annotations have no stream and would make the GPU look busy: 0.44 s of 0.66 s
    annotations = [e for e in xs if e["cat"] == "gpu_user_annotation"]
    assert len(annotations) == 30 and not any("stream" in e["args"] for e in annotations)
    inflated = reference_fn(A, "temporal_breakdown")(
        [dict(e, cat="gpu_memset") if e in annotations else e for e in xs]
    )
    assert inflated["busy_us"] > 2.5 * b["busy_us"]
    # the three profiler steps share out every GPU event of the trace
    steps = [checks.breakdown_case_events(("step", checks.DDP_TRACE, s)) for s in checks.DDP_STEPS]
    per_step = [sum(e.get("cat") in checks.BREAKDOWN_GPU_CATS for e in s) for s in steps]
    assert per_step == [1258, 1258, 1258] and sum(per_step) == len(gpu)


def test_the_worked_example_of_the_text_is_what_the_reference_returns():
    import ast

    import nbformat

    from grader.runtime import course

    nb = nbformat.read(course.source_path(A), as_version=4)
    (text,) = [c.source for c in nb.cells if c.get("id") == "md-26a"]
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    tree = ast.parse(block)
    namespace = {"temporal_breakdown": reference_fn(A, "temporal_breakdown")}
    exec(compile(ast.Module(tree.body[:-1], []), "<md-26a>", "exec"), namespace)  # noqa: S102
    assert eval(compile(ast.Expression(tree.body[-1].value), "<md-26a>", "eval"), namespace)  # noqa: S307
    assert namespace["events"] == checks.WORKED_EXAMPLE
    assert reference_fn(A, "temporal_breakdown")(checks.WORKED_EXAMPLE) == (
        checks.WORKED_EXAMPLE_ANSWER
    )


def test_the_hidden_cases_cover_every_shipped_trace_and_the_edge_cases():
    cases = checks._hidden_breakdown_cases()
    traces = {c[1] for c in cases if c[0] == "trace"}
    assert traces | {checks.VISIBLE_TRACE} == set(checks.real_trace_names())
    assert "mi250_rocm_train" in traces and "triton_example" in traces
    assert {c[2] for c in cases if c[0] == "step"} == set(checks.DDP_STEPS)
    ref = reference_fn(A, "temporal_breakdown")
    raising = []
    for case in cases:
        try:
            ref(checks.breakdown_case_events(case))
        except ValueError:
            raising.append(case)
    assert len(raising) == 2 and ([] in [c[2] for c in raising])


@pytest.mark.parametrize(
    "sample, cause",
    [
        ("wrong_temporal_breakdown_sums_durations", "sum of the GPU events' durations"),
        ("wrong_temporal_breakdown_nccl_is_compute", "NCCL kernels counted as compute"),
        ("wrong_temporal_breakdown_ignores_memcpy", "copies and memsets left out"),
        ("wrong_temporal_breakdown_span_includes_cpu_events", "the span covers host events"),
        ("wrong_temporal_breakdown_counts_gpu_user_annotation", "gpu_user_annotation events"),
        ("wrong_temporal_breakdown_selects_by_stream", "selected by their args.stream"),
        ("wrong_temporal_breakdown_assumes_sorted", "in list order"),
        ("wrong_temporal_breakdown_nested_interval", "largest end seen so far"),
        ("wrong_temporal_breakdown_skips_zero_duration", "zero-duration events count"),
        ("wrong_temporal_breakdown_zeros_without_gpu_events", "raise ValueError"),
    ],
)
def test_each_wrong_breakdown_is_told_its_cause(sample, cause):
    answer = answer_fn(A, sample, "temporal_breakdown")
    with pytest.raises(CheckFailed) as failed:
        checks.check_temporal_breakdown(answer)
        checks.check_temporal_breakdown_hidden(answer)
    message = str(failed.value)
    assert cause in message and "Yours" in message and "Expected" in message


def test_an_answer_that_edits_its_input_changes_nothing_for_the_next_case(capsys):
    reference = reference_fn(A, "temporal_breakdown")

    def destructive(events):
        result = reference(events)
        for e in events:  # sorts, then spoils every event it was given
            e["ts"], e["dur"] = 0, 0
        events.clear()
        return result

    checks.check_temporal_breakdown_hidden(destructive)
    checks.check_temporal_breakdown_hidden(destructive)
    assert checks.raw_trace_events("a100_event_sync")[5] == _raw("a100_event_sync")[5]
    assert "OK:" in capsys.readouterr().out
