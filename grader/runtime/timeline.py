"""Profiler timelines drawn with matplotlib: CPU launches against GPU kernels.

:func:`profile_spans` runs a function under :mod:`torch.profiler` and returns one
:class:`Span` per top-level CPU operator, CUDA runtime call and GPU kernel;
:func:`plot_timeline` draws them as lanes. Used by 02_async (launch queue) and later
by 03_streams (copy/compute overlap).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from grader.runtime.quiet import captured_stderr

# Kineto (the profiler's backend) logs "ERROR ... gpuGetDeviceCount failed" on machines
# without a GPU; level 5 keeps only fatal messages. Read when the profiler first starts.
os.environ.setdefault("KINETO_LOG_LEVEL", "5")

#: Operators that copy a value to the host: a synchronization when the tensor is on a GPU.
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense")

LANE_CPU_OPS = "CPU: PyTorch ops"
LANE_LAUNCH = "CPU: CUDA runtime calls"
LANE_GPU = "GPU: kernels"


@dataclass(frozen=True)
class Span:
    """One interval on a timeline.

    Attributes:
        lane: Which row it belongs to (:data:`LANE_CPU_OPS`, :data:`LANE_LAUNCH`, :data:`LANE_GPU`).
        name: Operator, runtime call or kernel name.
        start_ms: Start, in ms after the first span.
        duration_ms: Length in ms.
    """

    lane: str
    name: str
    start_ms: float
    duration_ms: float


def profile_spans(fn: Callable[[], object]) -> list[Span]:
    """Profile one call of ``fn`` and return its timeline spans.

    CUDA activity is recorded when a GPU is available (the function is synchronized
    before profiling stops, so every kernel is captured).

    Args:
        fn: A function of no arguments, e.g. ``lambda: model(x)``.

    Returns:
        Spans sorted by start time; times in ms relative to the earliest span.
    """
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with captured_stderr(), profile(activities=activities) as prof:  # Kineto's "USDT:" lines
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    raw = []
    for evt in prof.events():
        start, end = evt.time_range.start, evt.time_range.end
        if end <= start:
            continue
        if evt.device_type != DeviceType.CPU:
            lane = LANE_GPU
        elif evt.name.startswith(("cuda", "cu")) and not evt.name.startswith("cudnn"):
            lane = LANE_LAUNCH
        elif evt.cpu_parent is None and evt.name.startswith("aten::"):
            lane = LANE_CPU_OPS
        else:
            continue
        raw.append((lane, evt.name, start, end))
    if not raw:
        return []
    t0 = min(r[2] for r in raw)
    spans = [Span(lane, name, (s - t0) / 1000.0, (e - s) / 1000.0) for lane, name, s, e in raw]
    return sorted(spans, key=lambda s: s.start_ms)


def plot_timeline(
    spans: list[Span],
    title: str,
    ax=None,
    no_gpu_note: str | None = None,
    lanes: list[str] | None = None,
    name_colors: dict[str, str] | None = None,
    min_width_ms: float | None = None,
):
    """Draw spans as horizontal lanes (ms on the x axis).

    Args:
        spans: From :func:`profile_spans`.
        title: Plot title (include the device and torch version).
        ax: Matplotlib axes to draw on; a new figure when None.
        no_gpu_note: Text written in the GPU lane when it has no spans.
        lanes: Lane names, bottom to top (default: GPU kernels, CUDA runtime calls, CPU
            ops). Spans of other lanes are not drawn.
        name_colors: Span-name prefix -> colour (e.g. ``{"H2D copy": "tab:green"}``),
            shown in a legend; other spans take their lane's colour.
        min_width_ms: The narrowest bar drawn (default: 0.4 % of the time shown, so that
            sub-microsecond ops stay visible); 0 draws every span at its true width, for a lane
            of many short kernels whose busy share the plot must not overstate.

    Returns:
        The matplotlib axes.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(10, 2.8))
    lanes = lanes or [LANE_GPU, LANE_LAUNCH, LANE_CPU_OPS]
    palette = ["tab:green", "tab:orange", "tab:blue", "tab:purple", "tab:brown", "tab:olive"]
    colors = {LANE_CPU_OPS: "tab:blue", LANE_LAUNCH: "tab:orange", LANE_GPU: "tab:green"}
    for i, lane in enumerate(lanes):
        colors.setdefault(lane, palette[i % len(palette)])
    end = max((s.start_ms + s.duration_ms for s in spans), default=1.0)
    min_width = end * 0.004 if min_width_ms is None else min_width_ms  # sub-µs ops stay visible
    for row, lane in enumerate(lanes):
        lane_spans = [s for s in spans if s.lane == lane]
        if lane_spans:
            bars = [(s.start_ms, max(s.duration_ms, min_width)) for s in lane_spans]
            faces = [_span_color(s, colors[lane], name_colors) for s in lane_spans]
            ax.broken_barh(
                bars, (row - 0.4, 0.8), facecolors=faces, edgecolor="black", linewidth=0.3
            )
        elif lane == LANE_GPU and no_gpu_note:
            ax.text(
                0.01,
                row,
                no_gpu_note,
                va="center",
                transform=ax.get_yaxis_transform(),
                fontsize=9,
                style="italic",
            )
    xlabel = "time since the first event (ms)"
    if any(s.name in SYNC_OPS for s in spans):
        xlabel += (
            "   ·   red: .item(), which copies a value to the host (a synchronization on a GPU)"
        )
    ax.set_xlim(0, end * 1.02)
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    if name_colors:
        from matplotlib.patches import Patch

        ax.legend(
            handles=[Patch(color=c, label=n) for n, c in name_colors.items()],
            loc="lower right",
            fontsize=8,
        )
    return ax


def _span_color(span: Span, lane_color: str, name_colors: dict[str, str] | None) -> str:
    if span.name in SYNC_OPS:
        return "tab:red"
    for prefix, color in (name_colors or {}).items():
        if span.name.startswith(prefix):
            return color
    return lane_color
