"""The CPU stand-ins: the simulated asynchronous GPU and the synchronization recorder."""

import time
from time import perf_counter as imported_perf_counter

import pytest
import torch
import torch.nn.functional as F

from grader.runtime.simulate import (
    COPY_TO_CPU,
    TO_CPU,
    WHERE_ONE_ARG,
    RaceError,
    SyncRecorder,
    simulated_cuda,
)

from .sync_cases import NO_SYNCS, SYNCS, TWO_DEVICES, sync_inputs

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available(), reason="simulated_cuda is for CPU-only machines"
)


def test_launch_is_asynchronous_and_synchronize_waits():
    with simulated_cuda() as sim:
        t0 = time.perf_counter()
        sim.launch(40)
        launched = time.perf_counter() - t0
        torch.cuda.synchronize()
        finished = time.perf_counter() - t0
    assert launched < 0.01
    assert finished >= 0.039


def test_events_measure_queued_work():
    with simulated_cuda() as sim:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        sim.launch(30)
        end.record()
        with pytest.raises(RuntimeError, match="has not completed"):
            start.elapsed_time(end)
        end.synchronize()
        assert start.elapsed_time(end) == pytest.approx(30, abs=5)


def test_patches_are_undone_and_counts_are_reported():
    real = torch.cuda.is_available
    with simulated_cuda(device_count=3):
        assert torch.cuda.is_available() and torch.cuda.device_count() == 3
        assert torch.accelerator.device_count() == 3
        with pytest.raises(AssertionError, match="Invalid device id 3"):
            torch.cuda.get_device_name(3)
    assert torch.cuda.is_available is real and not torch.cuda.is_available()


def test_negative_durations_and_counts_are_refused():
    with pytest.raises(ValueError):
        with simulated_cuda(device_count=-1):
            pass
    with simulated_cuda() as sim, pytest.raises(ValueError):
        sim.launch(-1)


@pytest.mark.parametrize(
    "code, expected",
    [
        ("x.sum().item()", ".item()"),
        ("float(x.sum())", "float(tensor)"),
        ("x.tolist()", ".tolist()"),
        ("repr(x)", "printing or repr() of a tensor"),
        ("bool(x.sum() > 0)", "bool(tensor) / if tensor: (a data-dependent branch)"),
        ("x[x > 0]", "boolean-mask indexing x[mask] (output size depends on the data)"),
        ("torch.nonzero(x)", "torch.nonzero (output size depends on the data)"),
    ],
)
def test_recorder_flags_synchronizing_calls(code, expected):
    x = torch.randn(8)
    with SyncRecorder() as rec:
        eval(code, {"x": x, "torch": torch})
    assert expected in rec.calls


@pytest.mark.parametrize(
    "code, expected",
    [
        ("m.to('cpu')", TO_CPU),
        ("m.to(device='cpu')", TO_CPU),
        ("m.to(torch.device('cpu'))", TO_CPU),
        ("m.to('cpu', torch.float64)", TO_CPU),
        ("m.to(c)", TO_CPU),
        ("c.copy_(m)", COPY_TO_CPU),
        ("c.copy_(m, non_blocking=True)", COPY_TO_CPU),  # pageable: CUDA waits for it
        ("m.cpu()", ".cpu()"),
        ("torch.where(c > 0)", WHERE_ONE_ARG),
    ],
)
def test_recorder_flags_copies_to_the_host(code, expected):
    """A meta tensor stands for a GPU tensor: moving it to the CPU is a device-to-host copy.
    The recorder counts it and hands back a CPU tensor (no data), so the code runs on."""
    m, c = torch.randn(8, device="meta"), torch.randn(8)
    with SyncRecorder() as rec:
        out = eval(code, {"m": m, "c": c, "torch": torch})
    assert rec.calls == [expected]
    if isinstance(out, torch.Tensor):
        assert out.device.type == "cpu"


@pytest.mark.parametrize(
    "code",
    [
        "m.to('meta')",
        "m.to(m)",
        "m.to(torch.float16)",
        "m.to('cpu', non_blocking=True)",  # into pinned memory: returns before the copy is done
        "c.to('cpu')",  # already there (the model's device, in a CPU check)
        "c.to(torch.device('cpu'))",
        "c.to(c)",
        "c.copy_(c)",
        "m.clone().copy_(m)",
        "torch.where(c > 0, c, 0.0)",
        "c.where(c > 0, 0.0)",
    ],
)
def test_recorder_ignores_harmless_moves(code):
    m, c = torch.randn(8, device="meta"), torch.randn(8)
    with SyncRecorder() as rec:
        eval(code, {"m": m, "c": c, "torch": torch})
    assert rec.calls == []


def test_recorder_ignores_device_side_work():
    x = torch.randn(8, 8)
    with SyncRecorder() as rec:
        y = torch.relu(x @ x).sum(dim=0)
        y = y[torch.arange(3)]
        _ = torch.where(y > 0, y, torch.zeros_like(y))
    assert rec.calls == []


def test_streams_run_concurrently_and_wait_stream_orders_them():
    with simulated_cuda() as sim:
        side = torch.cuda.Stream()
        t0 = time.perf_counter()
        sim.launch(40)
        with torch.cuda.stream(side):
            assert torch.cuda.current_stream() is side
            sim.launch(40)
        torch.cuda.synchronize()
        concurrent = time.perf_counter() - t0
        sim.launch(30)
        side.wait_stream(torch.cuda.current_stream())
        end = sim.launch(1, stream=side)
    assert concurrent < 0.07
    assert end >= sim.default.busy_until - 1e-9


def test_pinned_non_blocking_copy_overlaps_but_pageable_blocks():
    x = torch.randn(1_250_000)  # 5 MB: 20 ms on the simulated link
    with simulated_cuda(transfers=True) as sim:
        t0 = time.perf_counter()
        pinned = x.pin_memory()
        assert pinned.is_pinned() and not x.is_pinned()
        with torch.cuda.stream(torch.cuda.Stream()):
            on_gpu = pinned.to("cuda", non_blocking=True)
        assert time.perf_counter() - t0 < 0.01  # returned before the copy finished
        assert torch.equal(on_gpu, x)
        with pytest.raises(RaceError):
            sim.launch(1, reads=[on_gpu])  # the default stream did not wait
        t0 = time.perf_counter()
        x.to("cuda", non_blocking=True)  # pageable: the host waits for the copy
        assert time.perf_counter() - t0 >= 0.019


def test_copies_share_one_copy_engine():
    with simulated_cuda(transfers=True) as sim:
        a, b = (torch.randn(1_250_000).pin_memory() for _ in range(2))
        for t in (a, b):
            with torch.cuda.stream(torch.cuda.Stream()):
                t.to("cuda", non_blocking=True)
        copies = [k for k in sim.kernels if k.label.startswith("H2D")]
        assert copies[1].start >= copies[0].end - 1e-9


def test_allocator_rounds_caches_and_tracks_peaks():
    with simulated_cuda() as sim:
        a = sim.malloc(1000)
        assert torch.cuda.memory_allocated() == 1024 and torch.cuda.memory_reserved() == 2 * 2**20
        b = sim.malloc(3 * 2**20)
        sim.free(a)
        sim.free(b)
        assert (
            torch.cuda.memory_allocated() == 0
            and torch.cuda.max_memory_allocated() == 1024 + 3 * 2**20
        )
        assert torch.cuda.memory_reserved() == 4 * 2**20  # freed blocks stay cached
        torch.cuda.reset_peak_memory_stats()
        assert torch.cuda.max_memory_allocated() == 0
        torch.cuda.empty_cache()
        assert torch.cuda.memory_reserved() == 0


def test_virtual_clock_gives_exact_copy_times():
    with simulated_cuda(transfers=True, virtual_time=True, h2d_gbps=10.0, pin_gbps=5.0) as sim:
        host = torch.empty(100_000_000, dtype=torch.uint8)
        t0 = time.perf_counter()
        pinned = host.pin_memory()  # 20 ms at 5 GB/s
        assert time.perf_counter() - t0 == pytest.approx(0.02, abs=1e-4)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        pinned.to("cuda", non_blocking=True)  # 10 ms at 10 GB/s
        end.record()
        end.synchronize()
        assert start.elapsed_time(end) == pytest.approx(10.0, abs=1e-6)
        assert sim.now() > t0


def test_the_first_copy_of_each_kind_pays_the_one_time_cost():
    """first_copy_ms is added once to the first pinned and once to the first pageable copy."""
    with simulated_cuda(
        transfers=True, virtual_time=True, h2d_gbps=10.0, pageable_gbps=5.0, first_copy_ms=20.0
    ):
        host = torch.empty(100_000_000, dtype=torch.uint8)
        pinned = host.pin_memory()

        def copy_ms(src, non_blocking):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            src.to("cuda", non_blocking=non_blocking)
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        assert copy_ms(pinned, True) == pytest.approx(30.0, abs=1e-6)  # 10 ms + 20 ms once
        assert copy_ms(pinned, True) == pytest.approx(10.0, abs=1e-6)
        assert copy_ms(host, False) == pytest.approx(40.0, abs=1e-6)  # 20 ms + 20 ms once
        assert copy_ms(host, False) == pytest.approx(20.0, abs=1e-6)
    with pytest.raises(ValueError, match="first_copy_ms"):
        with simulated_cuda(transfers=True, first_copy_ms=-1.0):
            pass


# --------------------------------------------------------------------------- matmuls and timers
def _sim_matmul_inputs(n=1024, dtype=torch.float16):
    return torch.randn(n, n, device="cuda", dtype=dtype), torch.randn(
        n, n, device="cuda", dtype=dtype
    )


def test_benchmark_timer_synchronizes_and_reads_the_virtual_clock():
    """torch.utils.benchmark.Timer's default timer synchronizes the GPU; in the simulation it
    does too, on the virtual clock (torch 2.11 picked a plain clock at import on a CPU host)."""
    from torch.utils import benchmark

    from grader.runtime.simulate import SIM_MATMUL_TFLOPS

    with simulated_cuda(transfers=True, virtual_time=True):
        a, b = _sim_matmul_inputs()
        timer = benchmark.Timer("a @ b", globals={"a": a, "b": b})
        medians = [
            timer.blocked_autorange(min_run_time=0.05).median,
            timer.adaptive_autorange().median,
            timer.timeit(20).median,
        ]
    expected = 2 * 1024**3 / (SIM_MATMUL_TFLOPS[torch.float16] * 1e12)
    assert medians == pytest.approx([expected] * 3, rel=1e-3)


def _timed_with_an_imported_clock(a, b):
    torch.cuda.synchronize()
    start = imported_perf_counter()
    a @ b
    torch.cuda.synchronize()
    return imported_perf_counter() - start


def test_timeit_and_a_clock_imported_by_name_read_the_virtual_clock():
    import timeit

    timed = _timed_with_an_imported_clock
    with simulated_cuda(transfers=True, virtual_time=True) as sim, sim.clocks_seen_by(timed):
        a, b = _sim_matmul_inputs()
        by_name = timed(a, b)
        by_timeit = timeit.timeit(lambda: (a @ b, torch.cuda.synchronize()), number=4) / 4
    assert timed.__globals__["imported_perf_counter"] is time.perf_counter  # put back
    assert by_name == pytest.approx(by_timeit, rel=1e-3)
    assert by_name > 1e-6


def test_a_launch_without_synchronize_costs_only_launch_time_and_the_queue_is_bounded():
    from grader.runtime.simulate import SIM_LAUNCH_S, SIM_QUEUE_DEPTH

    with simulated_cuda(transfers=True, virtual_time=True) as sim:
        a, b = _sim_matmul_inputs(4096, torch.bfloat16)
        t0 = time.perf_counter()
        a @ b
        one = time.perf_counter() - t0
        for _ in range(SIM_QUEUE_DEPTH + 10):
            a @ b
        queued = len(sim.__dict__["_matmul_queue"])
    assert one == pytest.approx(SIM_LAUNCH_S, rel=0.01)
    assert queued <= SIM_QUEUE_DEPTH


def test_tf32_state_is_read_without_mixing_legacy_and_new_flags():
    from grader.runtime.simulate import SIM_MATMUL_TFLOPS

    matmul = torch.backends.cuda.matmul
    if not hasattr(matmul, "fp32_precision"):
        pytest.skip("torch < 2.9 has no fp32_precision")
    saved = matmul.fp32_precision
    try:
        with simulated_cuda(transfers=True, virtual_time=True) as sim:
            matmul.fp32_precision = "tf32"
            assert sim.matmul_tflops(torch.float32, 64, 64, 64) == SIM_MATMUL_TFLOPS["tf32"]
            matmul.fp32_precision = "ieee"
            assert sim.matmul_tflops(torch.float32, 64, 64, 64) == SIM_MATMUL_TFLOPS[torch.float32]
    finally:
        matmul.fp32_precision = saved


# --------------------------------------------------------------------------- what synchronizes
# Each case of tests/sync_cases.py runs on the simulated GPU (one sync in the trace, or none) and
# under SyncRecorder, where CPU tensors stand for GPU tensors.
def _syncs_on_the_simulated_gpu(case) -> int:
    from torch.profiler import record_function

    from grader.runtime import trace as tracing

    with simulated_cuda(kernels=True, virtual_time=True, allow_real_gpu=True) as sim:
        on_device = sync_inputs("cuda")
        with record_function("case"):
            case(**on_device)
        return len(tracing.parse(sim.chrome_trace()).within("case").syncs)


@pytest.mark.parametrize("name", list(SYNCS))
def test_ops_known_to_synchronize_wait_once_on_the_simulated_gpu(name):
    assert _syncs_on_the_simulated_gpu(SYNCS[name]) == 1


@pytest.mark.parametrize("name", list(NO_SYNCS))
def test_ops_known_not_to_synchronize_do_not_wait_on_the_simulated_gpu(name):
    assert _syncs_on_the_simulated_gpu(NO_SYNCS[name]) == 0


@pytest.mark.parametrize("name", [n for n in SYNCS if n not in TWO_DEVICES])
def test_sync_recorder_flags_the_ops_known_to_synchronize(name):
    inputs = sync_inputs()
    with SyncRecorder() as rec:
        SYNCS[name](**inputs)
    assert len(rec.calls) == 1, rec.calls


@pytest.mark.parametrize("name", [n for n in NO_SYNCS if n not in TWO_DEVICES])
def test_sync_recorder_passes_the_ops_known_not_to_synchronize(name):
    inputs = sync_inputs()
    with SyncRecorder() as rec:
        NO_SYNCS[name](**inputs)
    assert rec.calls == []


def test_sync_decisions_follow_semantics_not_names():
    """The same function synchronizes or not with its arguments: num_classes, output_size, a
    boolean or an integer index, a host or a device value."""
    from grader.runtime.simulate import MASK_TO_INDICES, host_read_reason

    x, ind, repeats = torch.rand(4), torch.tensor([0, 2]), torch.tensor([2])
    mask = x > 0.5
    assert host_read_reason(F.one_hot, (ind,), {}) is not None
    assert host_read_reason(F.one_hot, (ind,), {"num_classes": 4}) is None
    assert host_read_reason(torch.repeat_interleave, (x, repeats), {}) is not None
    assert host_read_reason(torch.repeat_interleave, (x, repeats), {"output_size": 8}) is None
    assert host_read_reason(torch.Tensor.__getitem__, (x, mask), {}) is not None
    assert host_read_reason(torch.Tensor.__getitem__, (x, ind), {}) is None
    setitem = torch.Tensor.__setitem__
    assert host_read_reason(setitem, (x.clone(), mask, torch.tensor(1.0)), {}) == MASK_TO_INDICES
    assert (
        host_read_reason(setitem, (x.clone(), mask, torch.tensor(1.0)), {}, lambda t: t.dim() > 0)
        is None
    )  # one host value through one mask: masked_fill


def test_kernel_time_scale_makes_every_kernel_slower_by_that_factor():
    def kernel_us(scale):
        with simulated_cuda(
            kernels=True, virtual_time=True, allow_real_gpu=True, kernel_time_scale=scale
        ) as sim:
            a = torch.randn(256, 256).to("cuda")
            a @ a
            return [(k.end - k.start) * 1e6 for k in sim.kernels if k.kind == "kernel"]

    assert kernel_us(50.0) == pytest.approx([50 * t for t in kernel_us(1.0)])
    with pytest.raises(ValueError, match="kernel_time_scale"):
        with simulated_cuda(kernels=True, kernel_time_scale=0):
            pass


def test_exported_trace_names_its_tracks_and_reads_back_as_the_same_trace(tmp_path):
    """The file 10_profiling saves for Perfetto: metadata events name the simulated GPU, its
    streams and the host; the course's reader gets the same events from the file as from
    chrome_trace(); the file says it is simulated."""
    import json

    from grader.runtime import trace as tracing

    with simulated_cuda(kernels=True, transfers=True, virtual_time=True) as sim:
        x = torch.randn(64, 64).pin_memory().to("cuda", non_blocking=True)
        with torch.cuda.stream(torch.cuda.Stream()):
            y = torch.randn(64, 64).to("cuda")
        (x @ y).sum().item()
        path = tmp_path / "t.json"
        sim.export_chrome_trace(path)
        events = sim.chrome_trace()
    data = json.loads(path.read_text())
    assert data["simulated"] is True
    meta = {
        (e["name"], e["pid"], e["tid"]): e["args"]["name"]
        for e in data["traceEvents"]
        if e["ph"] == "M"
    }
    streams = sorted({e["tid"] for e in events if e["pid"] == 0})
    assert len(streams) == 2 and 7 in streams
    assert meta == {
        ("process_name", 0, 0): "simulated GPU (course stand-in)",
        ("process_name", 1, 1): "host",
        **{("thread_name", 0, s): f"stream {s}" for s in streams},
    }
    assert tracing.parse(path).summary() == tracing.parse(events).summary()
    assert tracing.parse(path).syncs


def test_a_copy_between_dtypes_converts_on_the_host_and_moves_the_destinations_bytes():
    """As PyTorch's copy_kernel_cuda: a uint8 host tensor copied into a float32 device buffer is
    first converted on the CPU (a new pageable tensor), so 4 bytes per element cross the link at
    the pageable rate, even from pinned memory."""
    with simulated_cuda(transfers=True, virtual_time=True, h2d_gbps=10.0, pageable_gbps=5.0):
        pinned = torch.ones(10_000_000, dtype=torch.uint8).pin_memory()
        same = torch.empty(10_000_000, dtype=torch.uint8, device="cuda")
        wider = torch.empty(10_000_000, device="cuda")

        def copy_ms(dst):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(pinned, non_blocking=True)
            end.record()
            end.synchronize()
            return start.elapsed_time(end)

        assert copy_ms(same) == pytest.approx(1.0, abs=1e-6)  # 10 MB at 10 GB/s
        assert copy_ms(wider) == pytest.approx(8.0, abs=1e-6)  # 40 MB at 5 GB/s
        assert wider.dtype == torch.float32 and wider.sum().item() == 10_000_000


def test_a_matmul_of_two_dtypes_is_refused_as_on_a_gpu():
    with simulated_cuda(transfers=True, virtual_time=True):
        a = torch.randn(8, 8, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(8, 8, device="cuda")
        with pytest.raises(RuntimeError, match="same dtype"):
            a @ b
        assert (a @ b.to(torch.bfloat16)).shape == (8, 8)


def test_record_stream_of_a_host_tensor_is_refused_as_on_a_gpu():
    """aten::record_stream has a CUDA kernel only: a CPU tensor raises NotImplementedError."""
    with simulated_cuda(kernels=True, virtual_time=True):
        side = torch.cuda.Stream()
        on_device = torch.ones(4).to("cuda")
        on_device.record_stream(side)
        with pytest.raises(NotImplementedError, match="'CPU' backend"):
            torch.ones(4).record_stream(side)
