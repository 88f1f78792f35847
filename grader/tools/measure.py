"""Measure the course's headline GPU figures on this machine: ``python -m grader measure``.

The course claims things only a GPU shows: pinned copies are faster, streams overlap copies
with compute, aligned shapes and Tensor Cores are faster, AMP speeds training, CUDA graphs
remove launch overhead, the caching allocator makes allocation cheap. This module measures each
claim with the course's own timing rules (warm-up, then ``torch.utils.benchmark`` or CUDA
events; the median), prints each figure beside the published peak of the detected GPU with the
ratio to it, and on a CUDA machine writes the records to ``images/recorded_figures.json``
(read by :mod:`grader.runtime.recorded`, which the notebooks use to show recorded figures when they run
without a GPU) and the plots to ``images/measured/``.

The ``triton`` group times 12_triton's reference kernels (``solutions/12_triton``, loaded as
the checks load them) against torch; it compiles them on a fresh machine (an empty Triton cache)
and autotunes the matmul: about 10-25 s on an H100, an estimate from the work, not yet a
measurement (7 compilations of 1-3 s each, plus 1-3 s and a short benchmark for each autotune
config beyond the first, 14 timings of about 0.3 s), against about 50 s for all the other groups
together on an H200 (2026-11-26).
``.ci/gpu-lease``'s ``MEASURE_S`` (170 s by default) covers both.

On a machine without CUDA it measures what a CPU can show (so the command and its output are
tested on CI), lists the figures that need a GPU, writes nothing to the recorded file unless
``--out`` names another file, and exits 0.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import torch
from tqdm.auto import tqdm

from grader.runtime.course import IMAGES
from grader.runtime.recorded import RECORDED_FILE

PLOTS = IMAGES / "measured"
_PLOTS_OVERRIDE: list[Path] = []


def plots_dir() -> Path:
    """Where plots go: ``images/measured/``, or the folder given to :func:`main`."""
    return _PLOTS_OVERRIDE[-1] if _PLOTS_OVERRIDE else PLOTS


@dataclass(frozen=True)
class Peak:
    """Published dense peaks of one GPU model (no sparsity).

    Attributes:
        name: Model as printed by ``torch.cuda.get_device_name`` (matched by substring).
        tflops: dtype label (``bf16``, ``fp16``, ``tf32``, ``fp32``) -> dense TFLOP/s.
        memory_gb_s: Device memory bandwidth, GB/s.
        host_link_gb_s: Host-to-device link, GB/s per direction.
        source: Where the numbers come from.
    """

    name: str
    tflops: dict[str, float]
    memory_gb_s: float
    host_link_gb_s: float
    source: str
    not_for: tuple[str, ...] = ()


#: Published peaks, most specific names first. Tensor Core figures are dense (the datasheets'
#: headline numbers are with 2:4 sparsity, twice these).
PEAKS = [
    Peak(
        "H100 80GB HBM3",  # SXM5
        {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
        3350.0,
        63.0,
        "NVIDIA H100 Tensor Core GPU datasheet (SXM5); PCIe Gen5 x16: 64 GB/s raw per "
        "direction, about 63 GB/s after encoding",
    ),
    Peak(
        "H100 PCIe",
        {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.2},
        2000.0,
        63.0,
        "NVIDIA H100 Tensor Core GPU datasheet (PCIe)",
    ),
    Peak(
        "H200",
        {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9},
        4800.0,
        63.0,
        "NVIDIA H200 Tensor Core GPU datasheet (SXM)",
        not_for=("NVL",),  # the H200 NVL (PCIe) card has lower peaks
    ),
    Peak(
        "A100-SXM4-80GB",
        {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
        2039.0,
        31.5,
        "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM); PCIe Gen4 x16 about 31.5 GB/s",
    ),
    Peak(
        "A100",
        {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
        1555.0,
        31.5,
        "NVIDIA A100 Tensor Core GPU datasheet (40GB)",
        not_for=("80GB",),  # the 80 GB PCIe card has more memory bandwidth
    ),
    Peak(
        "L4",
        {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3},
        300.0,
        31.5,
        "NVIDIA L4 Tensor Core GPU datasheet",
    ),
]


def find_peak(device_name: str) -> Peak | None:
    """The published peaks of a GPU model, or None when the course does not know it (then no
    ratio to a peak is printed rather than a wrong one)."""
    name = device_name.lower()
    for peak in PEAKS:
        if peak.name.lower() in name and not any(x.lower() in name for x in peak.not_for):
            return peak
    return None


@dataclass
class Figure:
    """One measured figure.

    Attributes:
        figure: Record key (the notebooks look figures up by it).
        value: The measured value in ``unit``.
        unit: ``TFLOP/s``, ``GB/s``, ``ms``, ``us`` or ``x`` (a ratio, higher is better).
        peak: Key of the matching peak (``tflops:bf16``, ``memory``, ``host_link``) or None.
        note: What was measured, in words.
    """

    figure: str
    value: float
    unit: str
    peak: str | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)


def peak_value(peak: Peak | None, key: str | None) -> float | None:
    """The peak named by a :attr:`Figure.peak` key, or None."""
    if peak is None or key is None:
        return None
    if key.startswith("tflops:"):
        return peak.tflops.get(key.split(":", 1)[1])
    return {"memory": peak.memory_gb_s, "host_link": peak.host_link_gb_s}.get(key)


def describe_row(fig: Figure, peak: Peak | None) -> str:
    """``matmul_bf16_8192: 797 TFLOP/s = 81% of peak (989 TFLOP/s)`` or without the peak."""
    text = f"{fig.figure}: {fig.value:.3g} {fig.unit}"
    limit = peak_value(peak, fig.peak)
    if limit:
        text += f" = {100 * fig.value / limit:.0f}% of peak ({limit:g} {fig.unit})"
    return text + (f"  [{fig.note}]" if fig.note else "")


# --------------------------------------------------------------------------- timing rules
def median_ms(fn: Callable[[], object], *, min_run_time: float = 0.2) -> float:
    """Median time of ``fn()`` in ms with ``torch.utils.benchmark`` (warm-up included; it
    synchronizes CUDA around each measurement)."""
    from torch.utils import benchmark

    fn()
    timer = benchmark.Timer("fn()", globals={"fn": fn})
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e3


def events_ms(fn: Callable[[], object], repeat: int = 10) -> float:
    """Median time of ``fn()`` in ms with CUDA events, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def matmul_tflops(n: int, dtype: torch.dtype, device: str, m: int | None = None) -> float:
    """TFLOP/s of an ``n×k @ k×m`` matmul (``k = n``, ``m = m or n``) in ``dtype``."""
    m = m or n
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, m, device=device, dtype=dtype)
    return 2 * n * n * m / (median_ms(lambda: a @ b) / 1e3) / 1e12


# --------------------------------------------------------------------------- GPU figures
def _matmuls() -> list[Figure]:
    out = [
        Figure("matmul_bf16_8192", matmul_tflops(8192, torch.bfloat16, "cuda"), "TFLOP/s",
               "tflops:bf16", "8192³ bf16 matmul"),
        Figure("matmul_fp16_8192", matmul_tflops(8192, torch.float16, "cuda"), "TFLOP/s",
               "tflops:fp16", "8192³ fp16 matmul"),
    ]  # fmt: skip
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        strict = matmul_tflops(8192, torch.float32, "cuda")
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = matmul_tflops(8192, torch.float32, "cuda")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    out += [
        Figure("matmul_fp32_8192", strict, "TFLOP/s", "tflops:fp32", "strict float32"),
        Figure("matmul_tf32_8192", tf32, "TFLOP/s", "tflops:tf32", "float32 with TF32 allowed"),
        Figure("matmul_tf32_vs_fp32_8192", tf32 / strict, "x", None, "TF32 / strict fp32"),
    ]
    aligned = matmul_tflops(8192, torch.bfloat16, "cuda")
    odd = matmul_tflops(8191, torch.bfloat16, "cuda")
    out.append(Figure("matmul_aligned_8192_vs_8191", aligned / odd, "x", None,
                      "bf16 TFLOP/s at n = 8192 / at n = 8191"))  # fmt: skip
    out.append(Figure("matmul_bf16_sawtooth_4096",
                      matmul_tflops(4096, torch.bfloat16, "cuda")
                      / matmul_tflops(4095, torch.bfloat16, "cuda"),
                      "x", None, "bf16 TFLOP/s at n = 4096 / at n = 4095"))  # fmt: skip
    return out


def _ffn() -> list[Figure]:
    """A transformer MLP (4096 -> d_ff -> 4096, bf16, 8192 tokens): d_ff = 10944 (a multiple
    of 64) vs 10922 (8/3 × 4096, as a naive SwiGLU sizing gives)."""
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    ms = {}
    for d_ff in (10922, 10944):
        w1 = torch.randn(4096, d_ff, device="cuda", dtype=torch.bfloat16) / 64
        w2 = torch.randn(d_ff, 4096, device="cuda", dtype=torch.bfloat16) / 64
        ms[d_ff] = median_ms(lambda w1=w1, w2=w2: torch.relu(x @ w1) @ w2)
    return [
        Figure("ffn_dff_10922_ms", ms[10922], "ms", None, "MLP forward, d_ff = 10922"),
        Figure("ffn_dff_10944_ms", ms[10944], "ms", None, "MLP forward, d_ff = 10944"),
        Figure("ffn_dff_10944_vs_10922", ms[10922] / ms[10944], "x", None,
               "time at 10922 / time at 10944 (the larger, aligned one does more work)"),
    ]  # fmt: skip


H2D_SIZES_MB = (1, 4, 16, 64, 256)


def _h2d() -> list[Figure]:
    curves: dict[str, list[float]] = {"pinned": [], "pageable": []}
    for mb in H2D_SIZES_MB:
        n = mb * 2**20 // 4
        dev = torch.empty(n, device="cuda")
        for kind in curves:
            host = torch.randn(n, pin_memory=kind == "pinned")
            ms = events_ms(lambda host=host, dev=dev: dev.copy_(host, non_blocking=True))
            curves[kind].append(mb * 2**20 / (ms / 1e3) / 1e9)
    _plot(
        "h2d_bandwidth.png",
        "host-to-device copy bandwidth",
        "transfer size (MB)",
        "GB/s",
        {k: (list(H2D_SIZES_MB), v) for k, v in curves.items()},
        logx=True,
    )
    return [
        Figure("h2d_bandwidth_pinned_256MB", curves["pinned"][-1], "GB/s", "host_link",
               "pinned host memory", {"sizes_mb": list(H2D_SIZES_MB), "gb_s": curves["pinned"]}),
        Figure("h2d_bandwidth_pageable_256MB", curves["pageable"][-1], "GB/s", "host_link",
               "pageable host memory",
               {"sizes_mb": list(H2D_SIZES_MB), "gb_s": curves["pageable"]}),
    ]  # fmt: skip


def _overlap() -> list[Figure]:
    """Eight batches of 64 MB: copy each (pinned, on a copy stream) while computing on the
    previous one, vs copy-then-compute on one stream. The compute per batch is calibrated to
    take about as long as one batch's copy, the case prefetching is for: the ideal ratio is
    then (copy + compute) / max(copy, compute), about 2 (the record's ``extra`` has both
    times and that ideal). Ratio = serial time / overlapped time."""
    batches = [torch.randn(16 * 2**20, pin_memory=True) for _ in range(8)]
    weight = torch.randn(2048, 2048, device="cuda")
    copy_stream = torch.cuda.Stream()
    device_batch = torch.empty(16 * 2**20, device="cuda")
    copy_ms = events_ms(lambda: device_batch.copy_(batches[0], non_blocking=True))
    y0 = device_batch.view(-1, 2048)[:2048]
    step_ms = events_ms(lambda: torch.tanh(y0 @ weight))
    steps = max(1, round(copy_ms / step_ms))

    def compute(x):
        y = x.view(-1, 2048)[:2048]
        for _ in range(steps):
            y = torch.tanh(y @ weight)
        return y

    def serial():
        for b in batches:
            compute(b.cuda(non_blocking=True))

    def overlapped():
        main = torch.cuda.current_stream()
        nxt = None
        with torch.cuda.stream(copy_stream):
            nxt = batches[0].cuda(non_blocking=True)
        for i in range(len(batches)):
            main.wait_stream(copy_stream)
            cur = nxt
            cur.record_stream(main)
            if i + 1 < len(batches):
                with torch.cuda.stream(copy_stream):
                    nxt = batches[i + 1].cuda(non_blocking=True)
            compute(cur)

    compute_ms = events_ms(lambda: compute(device_batch))
    s, o = events_ms(serial, 5), events_ms(overlapped, 5)
    ideal = (copy_ms + compute_ms) / max(copy_ms, compute_ms)
    return [Figure("overlap_prefetch_ratio", s / o, "x", None,
                   f"serial {s:.1f} ms / prefetched {o:.1f} ms, 8 batches of 64 MB, each copied "
                   f"in {copy_ms:.2f} ms and computed on for {compute_ms:.2f} ms "
                   f"(ideal {ideal:.2f}x)",
                   {"copy_ms": round(copy_ms, 3), "compute_ms": round(compute_ms, 3),
                    "ideal": round(ideal, 3)})]  # fmt: skip


def _d2d() -> list[Figure]:
    n = 1024 * 2**20 // 4  # 1 GiB
    a, b = torch.empty(n, device="cuda"), torch.empty(n, device="cuda")
    ms = events_ms(lambda: b.copy_(a))
    return [Figure("d2d_copy_bandwidth", 2 * n * 4 / (ms / 1e3) / 1e9, "GB/s", "memory",
                   "1 GiB device-to-device copy, bytes read + written")]  # fmt: skip


def _p2p() -> list[Figure]:
    """A 1 GiB copy from ``cuda:0`` to ``cuda:1`` (07's peer-to-peer access), GB/s one way;
    nothing on a machine with one GPU. Whether it went peer to peer or through the host is in
    the note (``torch.cuda.can_device_access_peer``)."""
    if torch.cuda.device_count() < 2:
        return []
    n = 1024 * 2**20 // 4
    a = torch.empty(n, device="cuda:0")
    b = torch.empty(n, device="cuda:1")
    ms = events_ms(lambda: b.copy_(a))
    peer = torch.cuda.can_device_access_peer(0, 1)
    return [Figure("p2p_copy_bandwidth", n * 4 / (ms / 1e3) / 1e9, "GB/s", None,
                   f"1 GiB copy cuda:0 -> cuda:1, one direction; peer access: {peer}")]  # fmt: skip


def _launch_overhead() -> list[Figure]:
    from grader.checks.ch09_compilation import many_small_ops

    x = torch.randn(256, device="cuda")
    eager = median_ms(lambda: many_small_ops(x))
    static_x = x.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            many_small_ops(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        many_small_ops(static_x)
    replay = median_ms(graph.replay)
    ops = 50
    _plot("launch_overhead.png", "50 small ops: per-op time", "", "us per op",
          {"eager": ([0], [eager * 1e3 / ops]), "CUDA graph": ([1], [replay * 1e3 / ops])},
          bars=True)  # fmt: skip
    return [
        Figure("launch_overhead_eager_us", eager * 1e3 / ops, "us", None, "per op, eager"),
        Figure("launch_overhead_graph_us", replay * 1e3 / ops, "us", None, "per op, graph"),
        Figure("cuda_graph_small_ops_speedup", eager / replay, "x", None,
               "many_small_ops: eager / CUDA graph replay"),
    ]  # fmt: skip


def _amp_resnet() -> list[Figure]:
    import torch.nn.functional as F
    import torchvision

    net = torchvision.models.resnet18(num_classes=10).cuda().to(memory_format=torch.channels_last)
    x = torch.randn(256, 3, 32, 32, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (256,), device="cuda")
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    ms = {}
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        for label, dtype, tf32 in (("fp32", None, False), ("tf32", None, True),
                                   ("fp16", torch.float16, False), ("bf16", torch.bfloat16, False)):  # fmt: skip
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
            scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)

            def step(dtype=dtype, scaler=scaler):
                opt.zero_grad(set_to_none=True)
                with torch.autocast(
                    "cuda", dtype=dtype or torch.float16, enabled=dtype is not None
                ):
                    loss = F.cross_entropy(net(x), y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()

            for _ in range(5):
                step()
            ms[label] = events_ms(step, 20)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
    return [
        *(Figure(f"amp_resnet18_step_{k}_ms", v, "ms", None, f"ResNet-18 training step, {k}")
          for k, v in ms.items()),
        Figure("amp_resnet18_step_speedup_fp16", ms["fp32"] / ms["fp16"], "x", None,
               "fp16 AMP vs strict fp32"),
        Figure("amp_resnet18_step_speedup_fp16_vs_tf32", ms["tf32"] / ms["fp16"], "x", None,
               "fp16 AMP vs TF32"),
        Figure("amp_resnet18_step_speedup_bf16", ms["fp32"] / ms["bf16"], "x", None,
               "bf16 AMP vs strict fp32"),
    ]  # fmt: skip


_ALLOC_SNIPPET = """
import json, statistics, time, torch
x = torch.empty(1, device="cuda")
times = []
for _ in range(5):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(200):
        y = torch.empty(64 * 2**20, device="cuda"); del y
    torch.cuda.synchronize(); times.append((time.perf_counter() - t) / 200 * 1e6)
print(json.dumps(statistics.median(times)))
"""


#: Environment variables that change the CUDA caching allocator (read once, at start-up).
_ALLOCATOR_ENV = ("PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def _allocator() -> list[Figure]:
    """Allocate and free 256 MB 200 times, with the caching allocator and without it
    (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``, read at start-up, so in a fresh process each)."""
    us = {}
    # the allocator settings of this process's environment must not reach the "cached" run
    base = {k: v for k, v in os.environ.items() if k not in _ALLOCATOR_ENV}
    for label, env in (("cached", {}), ("uncached", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})):
        proc = subprocess.run([sys.executable, "-c", _ALLOC_SNIPPET], env={**base, **env},
                              capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
        us[label] = float(proc.stdout.strip().splitlines()[-1])
    return [
        Figure("alloc_256MB_cached_us", us["cached"], "us", None, "caching allocator"),
        Figure("alloc_256MB_uncached_us", us["uncached"], "us", None, "cudaMalloc each time"),
        Figure("allocator_caching_speedup", us["uncached"] / us["cached"], "x", None,
               "uncached / cached time per 256 MB allocation"),
    ]  # fmt: skip


def _notebook_figures() -> list[Figure]:
    """The figures the notebooks' own demos show, measured the demos' way (01, 02, 05, 09)."""
    import statistics as stats
    import time

    import torch.nn as nn
    from torch.utils import benchmark

    from grader.checks.ch09_compilation import many_small_ops

    out = [Figure("matmul_fp32_512", matmul_tflops(512, torch.float32, "cuda"), "TFLOP/s",
                  "tflops:fp32", "512² float32 matmul (01's throughput plot)")]  # fmt: skip
    a = torch.randn(4096, 4096, device="cuda")
    a @ a
    naive, synced = [], []
    for _ in range(10):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ a
        naive.append(time.perf_counter() - t0)  # stops at the launch, as 02's wrong timer
        torch.cuda.synchronize()
        synced.append(time.perf_counter() - t0)
    out.append(Figure("timing_naive_vs_synchronized", stats.median(synced) / stats.median(naive),
                      "x", None, "4096² matmul: synchronized time / naive (launch-only) time"))  # fmt: skip
    w = torch.randn(256, 256, device="cuda")

    def steps(sync: bool):
        h = torch.randn(256, 256, device="cuda")
        for _ in range(10):
            h = torch.tanh(h @ w)
            if sync:
                h.sum().item()
        return h

    free, blocked = median_ms(lambda: steps(False)), median_ms(lambda: steps(True))
    _timeline_plot(steps)
    out.append(Figure("timeline_async_loop", blocked / free, "x", None,
                      "10 steps of tanh(h @ w): with .item() each step / without"))  # fmt: skip
    conv = nn.Conv2d(64, 64, 3, padding=1).cuda().half()
    images = torch.randn(64, 64, 56, 56, device="cuda", dtype=torch.half)
    t_nchw = benchmark.Timer("c(x)", globals={"c": conv, "x": images}).blocked_autorange().median
    conv_cl = conv.to(memory_format=torch.channels_last)
    images_cl = images.to(memory_format=torch.channels_last)
    t_cl = (
        benchmark.Timer("c(x)", globals={"c": conv_cl, "x": images_cl}).blocked_autorange().median
    )
    out.append(Figure("conv_channels_last_speedup", t_nchw / t_cl, "x", None,
                      "fp16 conv 64->64 at 56x56, batch 64: NCHW time / channels_last time"))  # fmt: skip
    x = torch.randn(4096, 768, device="cuda", dtype=torch.bfloat16)
    logits = {}
    for v in (50257, 50304):
        wv = torch.randn(v, 768, device="cuda", dtype=torch.bfloat16)
        logits[v] = benchmark.Timer("x @ w.T", globals={"x": x, "w": wv}).blocked_autorange().median
    out.append(Figure("vocab_padding_50257_vs_50304", logits[50257] / logits[50304], "x", None,
                      "bf16 logits 4096x768 @ 768xV: time at V=50257 / at V=50304"))  # fmt: skip
    serial_ms, overlapped_ms = _compute_and_copy_ms(False), _compute_and_copy_ms(True)
    out.append(Figure("d2h_copy_overlap", serial_ms / overlapped_ms, "x", None,
                      "6 fp32 4096² matmuls, each result copied to pinned CPU memory: blocking "
                      "copies / copies on a side stream (02)"))  # fmt: skip
    small = torch.randn(256, device="cuda")
    torch._dynamo.reset()
    compiled = torch.compile(many_small_ops)
    for _ in range(3):
        compiled(small)
    eager_ms, compiled_ms = (
        median_ms(lambda: many_small_ops(small)),
        median_ms(lambda: compiled(small)),
    )
    out.append(Figure("compile_small_ops_speedup_cuda", eager_ms / compiled_ms, "x", None,
                      "many_small_ops: eager / torch.compile (09)"))  # fmt: skip
    return out


def _compute_and_copy_ms(overlap: bool, n: int = 6, size: int = 4096) -> float:
    """Wall ms of n matmuls whose results are copied to pinned CPU memory, the way 02's demo does:
    blocking copies, or each copy on a side stream that waits only for its result."""
    import time

    inputs = [torch.randn(size, size, device="cuda") for _ in range(n)]
    outputs = [torch.empty(size, size, pin_memory=True) for _ in range(n)]
    copy_stream = torch.cuda.Stream()
    best = float("inf")
    for _ in range(3):  # the first round warms up cuBLAS and the pinned buffers
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for x, out in zip(inputs, outputs):
            y = x @ x
            if overlap:
                copy_stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(copy_stream):
                    out.copy_(y, non_blocking=True)
                y.record_stream(copy_stream)
            else:
                out.copy_(y)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) * 1000)
    return best


def _timeline_plot(steps) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from grader.runtime.timeline import plot_timeline, profile_spans

    plots_dir().mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, 1, figsize=(10, 5))
    for ax, sync in zip(axes, [False, True]):
        spans = profile_spans(lambda sync=sync: steps(sync))
        plot_timeline(
            spans,
            f"10 steps of tanh(h @ w), {'.item() each step' if sync else 'no synchronization'} "
            f"- {torch.cuda.get_device_name()}, torch {torch.__version__}",
            ax=ax,
        )
    fig.tight_layout()
    fig.savefig(plots_dir() / "timeline_async_loop.png", dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- 12_triton's figures
class GroupFailed(RuntimeError):
    """A figure group that failed part-way: ``figures`` holds what it measured before (kept and
    recorded like a finished group's), ``__cause__`` the failure."""

    def __init__(self, message: str, figures: list[Figure]) -> None:
        super().__init__(message)
        self.figures = figures


#: Sizes of the ``triton`` group (module constants so that a test can shrink them).
TRITON_BIAS_GELU_SHAPE = (8192, 8192)  # float32: 256 MiB in, 256 MiB out
TRITON_SOFTMAX_ROWS = 4096
#: softmax_rows's contract: 1 <= N <= 4096 (a row in one block). The figure is at the last N:
#: 64 MiB read and 64 MiB written, more than the L2 of the course's GPUs (50 MB on an H100).
TRITON_SOFTMAX_N = (256, 512, 1024, 2048, 4096)
TRITON_MATMUL_N = 4096


def _triton_reference():
    """12_triton's reference kernels, loaded from ``solutions/12_triton`` as the checks load
    them (:func:`grader.runtime.course.reference`): ``bias_gelu``, ``softmax_rows``, ``matmul``.

    Raises:
        RuntimeError: ``triton`` is not installed, or Triton's interpreter is on (the kernels
            would run on the CPU through the interpreter, not compiled for this GPU).
        ValueError: the course has no ``12_triton`` assignment (its solutions/ notebook).
    """
    try:
        import triton  # noqa: F401 - present with torch's CUDA wheels
    except ImportError as exc:
        raise RuntimeError(f"triton is not installed ({exc}): 12_triton's figures need it") from exc
    from grader.runtime.course import reference
    from grader.runtime.triton_cpu import interpreter_on

    if interpreter_on():
        raise RuntimeError("Triton's interpreter is on (TRITON_INTERPRET=1): the kernels would "
                           "run on the CPU, not compiled for the GPU; unset it to measure")  # fmt: skip
    ref = reference("12_triton")
    if interpreter_on():  # the reference's cells turned it on while their kernels were decorated
        raise RuntimeError("12_triton's reference turned Triton's interpreter on: its kernels "
                           "are interpreted, not compiled for the GPU")  # fmt: skip
    return ref


def _same(name: str, got: torch.Tensor, want: torch.Tensor, tol: float) -> None:
    """Refuse to time a kernel whose result is wrong (a fast wrong kernel is no figure)."""
    if got.shape != want.shape:
        raise AssertionError(f"{name}: shape {tuple(got.shape)}, torch gives {tuple(want.shape)}")
    err = ((got.float() - want.float()).norm() / want.float().norm().clamp_min(1e-12)).item()
    if not err <= tol:  # also catches NaN
        raise AssertionError(f"{name}: relative error {err:.2e} against torch (at most {tol:g})")


def _triton(device: str = "cuda") -> list[Figure]:
    """12_triton's kernels (its reference solution) against torch on the same run, each result
    first checked against torch's:

    * ``bias_gelu`` on x (8192, 8192) float32 + bias (8192,) vs eager
      ``F.gelu(x + bias, approximate="tanh")`` (two kernels and an intermediate tensor):
      speed-up = torch's time / Triton's;
    * ``softmax_rows`` on 4096 rows of N float32 (N = 256 ... 4096, its contract's range) vs
      ``torch.softmax``: GB/s = bytes read once and written once (2 · rows · N · 4) / time; the
      figure is at N = 4096 (64 MiB each way, more than the 50 MB L2 of an H100), with its ratio
      to the HBM peak; the curves go to ``images/measured/triton_softmax_bandwidth.png``;
    * ``matmul`` at 4096³ float16 (float32 accumulation; the reference autotunes its blocks on
      the first call, the warm-up) vs cuBLAS ``torch.matmul``: TFLOP/s = 2 · n³ / time;
    * on CUDA, ``triton_check_time_ratio_<function>`` for the five functions with a ``_cuda``
      check: the reference's time over torch's, with the check's own probe and sizes (what the
      checks' time bands are set from).

    Each part is timed with :func:`median_ms` after a warm-up call (which compiles). A failing
    part (triton cannot compile: ``triton.compiler.errors.CompilationError``; too many
    resources: ``triton.runtime.errors.OutOfResources``; a wrong result: ``AssertionError``)
    does not stop the others: the group raises :class:`GroupFailed` at the end, carrying the
    figures it measured.
    """
    import torch.nn.functional as F

    ref = _triton_reference()
    figures: list[Figure] = []
    errors: list[str] = []
    first: BaseException | None = None

    def part(name: str, fn: Callable[[], list[Figure]]) -> None:
        nonlocal first
        try:
            figures.extend(fn())
        except Exception as exc:  # noqa: BLE001 - reported through GroupFailed
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            first = first or exc

    def bias_gelu() -> list[Figure]:
        rows, cols = TRITON_BIAS_GELU_SHAPE
        x = torch.randn(rows, cols, device=device)
        bias = torch.randn(cols, device=device)
        _same("bias_gelu", ref.bias_gelu(x, bias), F.gelu(x + bias, approximate="tanh"), 1e-4)
        eager = median_ms(lambda: F.gelu(x + bias, approximate="tanh"))
        fused = median_ms(lambda: ref.bias_gelu(x, bias))
        gb_s = 2 * x.numel() * 4 / (fused / 1e3) / 1e9
        return [Figure("triton_bias_gelu_vs_torch", eager / fused, "x", None,
                       f"x ({rows}, {cols}) float32 + bias: eager F.gelu(x + bias, "
                       f"approximate='tanh') {eager:.3f} ms / Triton bias_gelu {fused:.3f} ms "
                       f"(one kernel, {gb_s:.0f} GB/s read + written)",
                       {"torch_ms": round(eager, 4), "triton_ms": round(fused, 4),
                        "triton_gb_s": round(gb_s, 1), "shape": [rows, cols]})]  # fmt: skip

    def softmax() -> list[Figure]:
        rows = TRITON_SOFTMAX_ROWS
        curves: dict[str, list[float]] = {"Triton softmax_rows": [], "torch.softmax": []}
        for n in TRITON_SOFTMAX_N:
            x = torch.randn(rows, n, device=device)
            _same(f"softmax_rows at N = {n}", ref.softmax_rows(x), torch.softmax(x, -1), 1e-4)
            moved = 2 * x.numel() * x.element_size()
            for label, fn in (("Triton softmax_rows", lambda x=x: ref.softmax_rows(x)),
                              ("torch.softmax", lambda x=x: torch.softmax(x, -1))):  # fmt: skip
                curves[label].append(moved / (median_ms(fn) / 1e3) / 1e9)
        peak = find_peak(torch.cuda.get_device_name()) if device == "cuda" else None
        _plot("triton_softmax_bandwidth.png", f"row softmax of {rows} x N float32",
              "N (columns)", "GB/s (read + written once)",
              {k: (list(TRITON_SOFTMAX_N), v) for k, v in curves.items()}, logx=True,
              hline=("HBM peak", peak.memory_gb_s) if peak else None)  # fmt: skip
        triton_gb_s, torch_gb_s = curves["Triton softmax_rows"], curves["torch.softmax"]
        n = TRITON_SOFTMAX_N[-1]
        return [Figure("triton_softmax_bandwidth", triton_gb_s[-1], "GB/s", "memory",
                       f"Triton softmax_rows, {rows} x {n} float32, bytes read + written once "
                       f"/ time; torch.softmax {torch_gb_s[-1]:.0f} GB/s on the same",
                       {"rows": rows, "n": list(TRITON_SOFTMAX_N),
                        "triton_gb_s": [round(v, 3) for v in triton_gb_s],
                        "torch_gb_s": [round(v, 3) for v in torch_gb_s]})]  # fmt: skip

    def matmul() -> list[Figure]:
        n = TRITON_MATMUL_N
        a = torch.randn(n, n, device=device, dtype=torch.float16)
        b = torch.randn(n, n, device=device, dtype=torch.float16)
        _same("matmul", ref.matmul(a, b), a @ b, 1e-2)
        flop = 2 * n**3
        triton_tflops = flop / (median_ms(lambda: ref.matmul(a, b)) / 1e3) / 1e12
        cublas_tflops = flop / (median_ms(lambda: a @ b) / 1e3) / 1e12
        ratio = triton_tflops / cublas_tflops
        return [Figure("triton_matmul_tflops", triton_tflops, "TFLOP/s", "tflops:fp16",
                       f"Triton matmul, {n}³ float16 in, float32 accumulation: {ratio:.2f}x "
                       f"cuBLAS torch.matmul ({cublas_tflops:.0f} TFLOP/s) in the same run",
                       {"cublas_tflops": round(cublas_tflops, 3),
                        "vs_cublas": round(ratio, 3)})]  # fmt: skip

    def check_ratios() -> list[Figure]:
        """What 12_triton's ``_cuda`` checks time, with their probes at their sizes: the
        reference's time over torch's for the same operation (the checks' bands,
        ``MAX_TIME_RATIO`` and ``BACKWARD_MAX_TIME_RATIO``, are set from these figures), each
        result first checked as the check checks it."""
        from grader.checks.ch12_triton import backward, kernels

        out = []
        for kind in kernels.CUDA_SPECS:
            seen = kernels._probe_cuda(getattr(ref, kind), kind)
            got = kernels.outcome(seen["call"])
            rtol, atol = kernels.CUDA_TOL[kind]
            want = kernels._expected_rows(kind)
            if not torch.allclose(got.double(), want.double(), rtol=rtol, atol=atol):
                raise AssertionError(f"{kind} at {kernels.CUDA_SPECS[kind][:3]}: wrong values")
            out.append((kind, kernels.CUDA_SPECS[kind][:3], kernels.TORCH_OPS[kind],
                        kernels.MAX_TIME_RATIO[kind], seen))  # fmt: skip
        spec = backward.BACKWARD_CUDA_SPEC
        seen = backward._probe_backward_cuda(ref.attention_backward, spec)
        got = kernels.outcome(seen["call"])
        rows = backward._rows(spec)
        for g, w in zip(got, backward.expected_gradients(spec, device=device)):
            w = w[rows].cpu()
            scale = w.abs().max().item()
            if not torch.allclose(g.double(), w, rtol=2e-2, atol=2e-2 * scale):
                raise AssertionError("attention_backward: wrong gradients")
        out.append(("attention_backward", spec[:3], "torch.autograd.grad of SDPA's output",
                    backward.BACKWARD_MAX_TIME_RATIO, seen))  # fmt: skip
        return [Figure(f"triton_check_time_ratio_{kind}", seen["mine_s"] / seen["torch_s"], "x",
                       None, f"12_triton's reference {kind} {tuple(size)} / {torch_op}, timed "
                       f"as its _cuda check times it (band: at most {band:g} x)",
                       {"triton_ms": round(seen["mine_s"] * 1e3, 4),
                        "torch_ms": round(seen["torch_s"] * 1e3, 4), "band": band})
                for kind, size, torch_op, band, seen in out]  # fmt: skip

    part("bias_gelu", bias_gelu)
    part("softmax_rows", softmax)
    part("matmul", matmul)
    if device == "cuda":  # the checks' probes make CUDA tensors of the checks' sizes
        part("check_ratios", check_ratios)
    if errors:
        raise GroupFailed("; ".join(errors), figures) from first
    return figures


#: (name, what it shows, function) of every GPU measurement, in the order they run.
GPU_FIGURES: list[tuple[str, str, Callable[[], list[Figure]]]] = [
    ("matmul", "bf16/fp16/TF32/fp32 TFLOP/s at 8192³, aligned vs misaligned n", _matmuls),
    ("ffn", "d_ff 10944 vs 10922 in a transformer MLP", _ffn),
    ("h2d", "pinned vs pageable host-to-device GB/s against size", _h2d),
    ("overlap", "copy/compute overlap with streams vs serial", _overlap),
    ("d2d", "device-to-device copy GB/s", _d2d),
    ("p2p", "GPU-to-GPU copy GB/s, cuda:0 -> cuda:1 (needs two GPUs; nothing with one)", _p2p),
    ("launch", "per-op launch overhead, eager vs CUDA graph replay", _launch_overhead),
    ("amp", "ResNet-18 training step: AMP fp16/bf16 vs fp32 and TF32", _amp_resnet),
    ("allocator", "caching allocator vs PYTORCH_NO_CUDA_MEMORY_CACHING=1", _allocator),
    ("notebooks", "the figures of the notebooks' own demos (01, 02, 05, 09)", _notebook_figures),
    ("triton", "12_triton's Triton kernels: bias+GELU, softmax GB/s, matmul vs cuBLAS", _triton),
]


# --------------------------------------------------------------------------- CPU figures
def _cpu() -> list[Figure]:
    """What a CPU can show of the same rules: matmul throughput and per-op dispatch cost."""
    from grader.checks.ch09_compilation import many_small_ops

    x = torch.randn(256)
    per_op = median_ms(lambda: many_small_ops(x), min_run_time=0.1) * 1e3 / 50
    return [
        Figure("cpu_matmul_fp32_1024", matmul_tflops(1024, torch.float32, "cpu"), "TFLOP/s",
               None, "this CPU, float32"),
        Figure("cpu_small_op_us", per_op, "us", None, "per op of many_small_ops on the CPU"),
    ]  # fmt: skip


# --------------------------------------------------------------------------- running
def _plot(name, title, xlabel, ylabel, series, logx=False, bars=False, hline=None) -> None:
    """One plot in :func:`plots_dir`: ``series`` maps a label to ``(xs, ys)``; ``hline`` is an
    optional ``(label, y)`` drawn as a dashed horizontal line (a peak)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots_dir().mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for label, (xs, ys) in series.items():
        if bars:
            ax.bar(xs, ys, label=label)
        else:
            ax.plot(xs, ys, "o-", label=label)
    if hline is not None:
        ax.axhline(hline[1], ls="--", color="gray", label=hline[0])
    if logx:
        ax.set_xscale("log", base=2)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    ax.set(title=f"{title}\n{device}, torch {torch.__version__}", xlabel=xlabel, ylabel=ylabel)
    ax.legend()
    fig.tight_layout()
    fig.savefig(plots_dir() / name, dpi=110)
    plt.close(fig)


def measure(
    only: list[str] | None = None,
    plots: Path | None = None,
    on_group: Callable[[str, list[Figure], BaseException | None], None] | None = None,
) -> tuple[list[Figure], list[str]]:
    """Measure every figure this machine can show.

    Args:
        only: Names from :data:`GPU_FIGURES` to run (default all).
        plots: Folder for the plots (default ``images/measured/``).
        on_group: Called on a GPU after each group with its name, its figures and the
            exception it raised (``None`` when it finished). With it, a group that raises is
            reported there and the other groups still run, so one failure (or a run stopped
            at a time limit, when the callback writes as it goes) keeps the figures already
            measured; a group that raises :class:`GroupFailed` passes the figures it measured
            before failing, which are kept too. Without it, the exception propagates.

    Returns:
        (figures measured, names of the GPU measurements skipped for lack of CUDA).

    Raises:
        ValueError: an unknown name in ``only``.
    """
    names = [n for n, _, _ in GPU_FIGURES]
    unknown = sorted(set(only or []) - set(names))
    if unknown:
        raise ValueError(f"unknown figure group(s) {unknown}; choose from {names}")
    chosen = [g for g in GPU_FIGURES if not only or g[0] in only]
    if not torch.cuda.is_available():
        return _cpu(), [f"{n}: {what}" for n, what, _ in chosen]
    figures: list[Figure] = []
    if plots is not None:
        _PLOTS_OVERRIDE.append(Path(plots))
    try:
        for name, _what, fn in tqdm(chosen, desc="measuring", unit="group"):
            try:
                got = fn()
            except Exception as exc:  # noqa: BLE001 - reported through on_group
                if on_group is None:
                    raise
                kept = list(getattr(exc, "figures", []))  # GroupFailed: measured before
                figures += kept
                on_group(name, kept, exc)
            else:
                figures += got
                if on_group is not None:
                    on_group(name, got, None)
            torch.cuda.empty_cache()
    finally:
        if plots is not None:
            _PLOTS_OVERRIDE.pop()
    return figures, []


def records(figures: list[Figure]) -> list[dict]:
    """The figures as records for ``images/recorded_figures.json`` (see :mod:`grader.runtime.recorded`)."""
    gpu = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if gpu else "CPU"
    peak = find_peak(device) if gpu else None
    out = []
    for fig in figures:
        rec = {
            "figure": fig.figure,
            "value": round(fig.value, 4),
            "unit": fig.unit,
            "device": device,
            "torch": torch.__version__,
            "cuda": torch.version.cuda or "",
            "date": date.today().isoformat(),
            "note": fig.note,
        }
        limit = peak_value(peak, fig.peak)
        if limit:
            rec.update(peak=limit, fraction_of_peak=round(fig.value / limit, 4),
                       peak_source=peak.source)  # fmt: skip
        if fig.extra:
            rec["extra"] = fig.extra
        out.append(rec)
    return out


def merge(path: Path, new: list[dict]) -> None:
    """Write ``new`` into the records file at ``path``, replacing records of the same figure
    measured on the same device and keeping all others."""
    old = json.loads(path.read_text()) if path.is_file() else []
    keys = {(r["figure"], r["device"]) for r in new}
    kept = [r for r in old if (r["figure"], r["device"]) not in keys]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")  # a run stopped mid-write keeps the old file
    partial.write_text(json.dumps(kept + new, indent=1) + "\n")
    os.replace(partial, path)


def main(only: list[str] | None = None, out: Path | None = None) -> int:
    """The ``measure`` command: measure, print beside the peaks, write the records.

    On a GPU each group's records are merged into the records file as soon as the group
    finishes, so a run stopped halfway (a lent machine's time limit) keeps what it measured; a
    group that raises is reported with its traceback and the others still run.

    Returns:
        0, or 1 when a group failed.
    """
    gpu = torch.cuda.is_available()
    device = torch.cuda.get_device_name() if gpu else "no CUDA GPU (CPU only)"
    peak = find_peak(device) if gpu else None
    print(f"Device: {device}; torch {torch.__version__}, CUDA {torch.version.cuda or '-'}")
    if gpu:
        print(f"Published peaks: {peak.source}" if peak else
              "Published peaks: this GPU model is not in grader/tools/measure.py PEAKS (ratios omitted)")  # fmt: skip
    target = out or (RECORDED_FILE if gpu else None)
    failed: list[str] = []

    def keep(name: str, figures: list[Figure], error: BaseException | None) -> None:
        if error is not None:
            traceback.print_exception(error)
            failed.append(f"{name}: {type(error).__name__}: {error}")
        for fig in figures:
            tqdm.write("  " + describe_row(fig, peak))
        if figures and target is not None:
            merge(Path(target), records(figures))

    figures, skipped = measure(only, on_group=keep)
    if not gpu:
        for fig in figures:
            print("  " + describe_row(fig, peak))
    if skipped:
        print("\nNeed a CUDA GPU, not measured here:")
        for line in skipped:
            print(f"  {line}")
    if failed:
        print("\nFailed (the other groups' figures are kept):")
        for line in failed:
            print(f"  {line}")
    if target is None:
        print("\nNothing written: CPU figures are not recordings of GPU claims "
              "(--out FILE writes them elsewhere).")  # fmt: skip
        return 0
    if not gpu:
        merge(Path(target), records(figures))
    print(f"\nWrote {len(figures)} figures to {target}" + (f"; plots in {PLOTS}" if gpu else ""))
    return 1 if failed else 0
