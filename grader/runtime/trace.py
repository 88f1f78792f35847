"""Read profiler traces: a real Kineto trace from ``torch.profiler`` or the simulated GPU's.

Both are Chrome trace events (the JSON that ``prof.export_chrome_trace(path)`` writes, and
that Perfetto and ``chrome://tracing`` open): complete events ``{"ph": "X", "cat", "name",
"ts", "dur", "pid", "tid", "args"}`` with times in microseconds. The categories used here are
Kineto's:

* ``kernel``: a GPU kernel, ``args.stream`` its CUDA stream;
* ``gpu_memcpy`` / ``gpu_memset``: a copy (``Memcpy HtoD (Pinned -> Device)``, ...) or memset
  on a stream;
* ``cuda_runtime`` / ``cuda_driver``: host calls into CUDA (``cudaLaunchKernel``,
  ``cudaMemcpyAsync``, ``cudaStreamSynchronize``, ``cudaGraphLaunch``, ...);
* ``cuda_sync``: synchronization events (recorded when the profiler's
  ``experimental_config`` asks for them): ``Stream Sync``, ``Event Sync``, ``Context Sync``
  make the host wait; ``Stream Wait Event`` (``cudaStreamWaitEvent``) makes a stream wait and
  the host goes on;
* ``cpu_op``: a PyTorch operator (``aten::addmm``); ``user_annotation``: a
  ``record_function`` range.

:func:`parse` accepts the ``{"traceEvents": [...]}`` document, its list of events, or a path to
the JSON file, and returns a :class:`Trace` whose properties the 10_profiling checks judge:
kernel launches, synchronizations, copies overlapped with kernels on other streams, and the
time a kernel took. Nothing here runs a student's code: it reads data.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Kineto logs "ERROR ... gpuGetDeviceCount failed" on machines without a GPU; level 5 keeps only
# fatal messages (read when the profiler first starts; as in grader.runtime.timeline).
os.environ.setdefault("KINETO_LOG_LEVEL", "5")

#: Host calls that launch GPU work: one per kernel, or one per CUDA graph replay.
LAUNCH_CALLS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaGraphLaunch",
        "cuGraphLaunch",
        # ROCm: PyTorch's HIP build records its runtime calls in the same ``cuda_runtime``
        # category (an MI250 trace: ``hipLaunchKernel``, ``hipExtModuleLaunchKernel`` for hipBLASLt)
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtLaunchKernel",
        "hipLaunchCooperativeKernel",
        "hipGraphLaunch",
    }
)
#: Host calls that make the host wait for the device.
SYNC_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cudaMemcpy",  # the synchronous copy
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
    }
)
#: The range ``torch.compile``'s compiled code opens around each call of a compiled frame in a
#: trace (``Torch-Compiled Region: 0/0``: frame 0, first compilation).
COMPILED_REGION = "Torch-Compiled Region"
#: How Inductor names the kernels it generates for the CPU (``cpp_fused_add_mul_pow_tanh_0``,
#: prefixed ``graph_0_`` in recent versions). They show in a CPU trace, each call as one
#: ``cpu_op`` event, when the code was compiled with
#: ``torch._inductor.config.cpp.enable_kernel_profile = True`` (Linux and Windows).
GENERATED_CPU_KERNEL = "cpp_fused"
#: ATen operators that do no work a GPU would launch a kernel for (allocation, metadata, the
#: host read itself); views are recognised from their schema (:func:`_launches_kernel`).
NO_KERNEL_OPS = frozenset(
    {
        "empty", "empty_like", "empty_strided", "resolve_conj", "resolve_neg", "lift_fresh",
        "result_type", "_local_scalar_dense", "item", "is_nonzero", "sym_size", "sym_stride",
        "sym_numel", "size", "stride", "numel", "dim",
    }
)  # fmt: skip
#: ``cuda_sync`` events in which only a stream waits (the host goes on): not synchronizations.
STREAM_ONLY_SYNCS = frozenset({"Stream Wait Event"})
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
HOST_CALL_CATS = frozenset({"cuda_runtime", "cuda_driver"})


@dataclass(frozen=True)
class Event:
    """One complete event of a trace (times in microseconds)."""

    cat: str
    name: str
    ts: float
    dur: float
    stream: int | None = None
    nbytes: int | None = None
    #: The host thread (``tid``) of a host event, and Kineto's ``args.correlation``: a kernel,
    #: copy or ``cuda_sync`` record carries the correlation of the runtime call behind it.
    tid: int | str | None = None
    correlation: int | None = None

    @property
    def end(self) -> float:
        return self.ts + self.dur


def _load(source: Any) -> list:
    if isinstance(source, (str, Path)):
        source = json.loads(Path(source).read_text())
    if isinstance(source, dict):
        source = source.get("traceEvents", [])
    if not isinstance(source, list):
        raise ValueError(f"not a Chrome trace: expected a list of events, got {type(source)}")
    return source


def real_names() -> list[str]:
    """The names of the real traces shipped in ``traces/`` (``a100_simple_add``, ...)."""
    from grader.runtime.course import TRACES

    return sorted(p.name.removesuffix(".json.gz") for p in TRACES.glob("*.json.gz"))


def real_events(name: str) -> list:
    """The raw events (``traceEvents``, as ``json.load`` reads them) of one of the real GPU
    traces the course ships in ``traces/``.

    Raises:
        FileNotFoundError: no such trace; the message lists those there are.
    """
    import gzip

    from grader.runtime.course import TRACES

    path = TRACES / f"{name}.json.gz"
    if not path.is_file():
        raise FileNotFoundError(
            f"no real trace named {name!r} in {TRACES}: there are {real_names()}"
        )
    with gzip.open(path, "rt") as f:
        return _load(json.load(f))


def real(name: str) -> Trace:
    """One of the real GPU traces the course ships in ``traces/`` (recorded by others on A100
    and MI250 GPUs; see ``traces/README.md`` for where each comes from), e.g.
    ``real("a100_ddp_nccl_2ranks")``.

    Raises:
        FileNotFoundError: no such trace; the message lists those there are.
    """
    return parse(real_events(name))


def parse(source: Any) -> Trace:
    """Read a trace: a path to its JSON, the ``{"traceEvents": ...}`` document, or the events.

    Raises:
        ValueError: the source is not a list of trace events.
    """
    events = []
    for raw in _load(source):
        if not isinstance(raw, dict) or raw.get("ph") != "X":
            continue  # metadata, flows (ac2g) and instant events carry no interval
        args = raw.get("args") or {}
        stream = args.get("stream")
        if stream is None and raw.get("cat") in GPU_CATS:
            stream = raw.get("tid")  # GPU lanes are streams (older exports leave args.stream out)
        nbytes = args.get("bytes")
        try:
            events.append(
                Event(
                    str(raw.get("cat", "")),
                    str(raw.get("name", "")),
                    float(raw.get("ts", 0.0)),
                    float(raw.get("dur", 0.0)),
                    int(stream) if isinstance(stream, (int, float)) else None,
                    int(nbytes) if isinstance(nbytes, (int, float)) else None,
                    raw.get("tid") if isinstance(raw.get("tid"), (int, str)) else None,
                    _int_or_none(args.get("correlation")),
                )
            )
        except (TypeError, ValueError):
            continue
    events.sort(key=lambda e: e.ts)
    return Trace(events)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _launches_kernel(cpu_op: str) -> bool:
    """Whether the ATen operator named ``cpu_op`` (``aten::addmm``) does work a GPU would launch
    a kernel for: not a view (every overload's schema returns an alias of an input: ``view``,
    ``t``, ``expand``, ``transpose``...) and not in :data:`NO_KERNEL_OPS`."""
    import torch

    name = cpu_op.removeprefix("aten::")
    if name in NO_KERNEL_OPS:
        return False
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return True
    try:
        overloads = [getattr(packet, o) for o in packet.overloads()]
    except (AttributeError, RuntimeError):
        return True
    return not (overloads and all(o.is_view for o in overloads))


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _covered(interval: tuple[float, float], merged: list[tuple[float, float]]) -> float:
    start, end = interval
    return sum(max(0.0, min(end, e) - max(start, s)) for s, e in merged)


@dataclass
class Trace:
    """The events of one trace, with the properties the checks read."""

    events: list[Event]

    def within(self, annotation: str) -> Trace:
        """The part of the trace from the first ``record_function`` range named
        ``annotation``: host events inside the range, GPU work that started after it began
        (GPU work runs later than the calls that queued it).

        Raises:
            ValueError: no such range in the trace.
        """
        ranges = [e for e in self.of("user_annotation") if e.name == annotation]
        if not ranges:
            raise ValueError(f"the trace has no record_function range named {annotation!r}")
        first = ranges[0]
        kept = [
            e
            for e in self.events
            if e is not first
            and (
                (e.cat in GPU_CATS and e.ts >= first.ts)
                or (e.cat not in GPU_CATS and e.ts >= first.ts and e.end <= first.end + 1e-3)
            )
        ]
        return Trace(kept)

    def of(self, *cats: str) -> list[Event]:
        """Events of these categories, in time order."""
        return [e for e in self.events if e.cat in cats]

    @property
    def kernels(self) -> list[Event]:
        return self.of("kernel")

    @property
    def copies(self) -> list[Event]:
        return self.of("gpu_memcpy")

    @property
    def host_to_device_copies(self) -> list[Event]:
        """Copies from host to device (Kineto names them ``Memcpy HtoD (...)``; the simulated
        GPU ``H2D copy``)."""
        return [e for e in self.copies if "HtoD" in e.name or "H2D" in e.name]

    @property
    def cpu_ops(self) -> list[Event]:
        return self.of("cpu_op")

    @property
    def launches(self) -> list[Event]:
        """Host calls that launched kernels or CUDA graphs. A driver call (``cuLaunchKernel``)
        that lies inside a runtime launch call (``cudaLaunchKernel``) is that same launch seen
        one level down, so it is not counted twice."""
        calls = [e for e in self.of(*HOST_CALL_CATS) if e.name in LAUNCH_CALLS]
        runtime = [e for e in calls if e.cat == "cuda_runtime"]
        return [
            e
            for e in calls
            if e.cat == "cuda_runtime" or not any(r.ts <= e.ts and e.end <= r.end for r in runtime)
        ]

    @property
    def launch_count(self) -> int:
        """Kernel launches: launch calls, or kernels when the trace has no runtime calls.

        Raises:
            ValueError: the trace has kernels and host runtime calls but none of those calls is
                a launch this reader knows (:data:`LAUNCH_CALLS`): another vendor's or a newer
                runtime's launch call, which must be added rather than counted as 0.
        """
        launches = self.launches
        if launches or not self.of(*HOST_CALL_CATS):
            return len(launches) if launches else len(self.kernels)
        if self.kernels:
            names = sorted({e.name for e in self.of(*HOST_CALL_CATS)})[:12]
            raise ValueError(
                f"the trace has {len(self.kernels)} kernels but none of its host calls is a "
                f"launch this reader knows (it knows {sorted(LAUNCH_CALLS)}); its host calls "
                f"include {names}: add the launch call to grader.runtime.trace.LAUNCH_CALLS"
            )
        return 0

    @property
    def syncs(self) -> list[Event]:
        """Synchronizations, one per host wait: runtime calls that wait for the device
        (:data:`SYNC_CALLS`), and ``cuda_sync`` records in which the host waits (not ``Stream
        Wait Event``: there a stream waits, on the GPU).

        A real Kineto trace records a wait twice, as the runtime call (``cudaStreamSynchronize``)
        and as its ``cuda_sync`` record (``Stream Sync``) carrying the call's correlation id: the
        call decides. So a record whose call is in the trace counts through that call, or not
        at all: Kineto also records ``cudaEventQuery``, which polls and returns at once, as an
        ``Event Sync``. A record without its call (a trace of ``cuda_sync`` events only, as the
        simulated GPU may write) counts by itself."""
        host = self.of(*HOST_CALL_CATS)
        calls = [e for e in host if e.name in SYNC_CALLS]
        correlated = {e.correlation for e in host if e.correlation is not None}
        records = [
            e
            for e in self.of("cuda_sync")
            if e.name not in STREAM_ONLY_SYNCS
            and (e.correlation is None or e.correlation not in correlated)
        ]
        return sorted(calls + records, key=lambda e: e.ts)

    @property
    def compiled_regions(self) -> list[Event]:
        """The calls of ``torch.compile``d frames (:data:`COMPILED_REGION` events)."""
        return [e for e in self.events if e.name.startswith(COMPILED_REGION)]

    @property
    def cpu_kernels(self) -> list[Event]:
        """The work of a CPU trace, one event per kernel a GPU would launch for it: the kernels
        Inductor generated (:data:`GENERATED_CPU_KERNEL`) and the PyTorch operators called at
        the top level (not from inside another operator) that do work (:func:`_launches_kernel`):
        what compiled code calls outside its generated kernels (``aten::addmm`` for a matmul),
        and eager operators between compiled graphs."""
        ops = [e for e in self.cpu_ops if e.name.startswith("aten::")]
        top = [
            e
            for e in ops
            if not any(
                o is not e and o.ts <= e.ts and e.end <= o.end and o.dur > e.dur for o in ops
            )
        ]
        generated = [e for e in self.events if GENERATED_CPU_KERNEL in e.name]
        return sorted([e for e in top if _launches_kernel(e.name)] + generated, key=lambda e: e.ts)

    def overlap_fraction(self) -> float:
        """The fraction of host-to-device copy time during which a kernel on another stream
        runs (0 when there are no copies): 1.0 means every copy was hidden behind compute."""
        copies = self.host_to_device_copies
        total = sum(c.dur for c in copies)
        if total <= 0:
            return 0.0
        hidden = 0.0
        for copy in copies:
            others = _merge([(k.ts, k.end) for k in self.kernels if k.stream != copy.stream])
            hidden += _covered((copy.ts, copy.end), others)
        return hidden / total

    @property
    def communication_kernels(self) -> list[Event]:
        """Collective-communication kernels (NCCL's ``ncclKernel_AllReduce_*``,
        ``ncclDevKernel_*``; RCCL keeps the names), in time order."""
        return [k for k in self.kernels if "nccl" in k.name.lower()]

    def communication_overlap_fraction(self) -> float:
        """The fraction of communication-kernel time during which a compute kernel runs on
        another stream (0 when there is no communication): how much of the all-reduce time was
        hidden behind backward. Overlapped communication still costs compute time: NCCL's
        kernels run on the same SMs as the compute kernels beside them."""
        comm = self.communication_kernels
        total = sum(k.dur for k in comm)
        if total <= 0:
            return 0.0
        ids = {id(k) for k in comm}
        hidden = 0.0
        for k in comm:
            compute = _merge(
                [(c.ts, c.end) for c in self.kernels if c.stream != k.stream and id(c) not in ids]
            )
            hidden += _covered((k.ts, k.end), compute)
        return hidden / total

    def kernels_of(self, op: str) -> list[Event]:
        """The kernels launched from inside the PyTorch operator ``op`` (``"aten::mm"``), found
        the way profilers do, not by the kernel's name: a launch call that lies inside one of
        the operator's events on the same host thread, and the kernel that carries that call's
        correlation id. Kernel names vary with the library and the GPU (cuBLAS's GEMMs are
        ``ampere_sgemm_*`` on an A100 and ``nvjet_*`` on an H100), the operator does not."""
        ops = [e for e in self.cpu_ops if e.name == op]
        ids = {
            call.correlation
            for call in self.launches
            if call.correlation is not None
            and any(o.tid == call.tid and o.ts <= call.ts and call.end <= o.end for o in ops)
        }
        return [k for k in self.kernels if k.correlation in ids]

    def kernel_time_us(self, name_contains: str = "", *, op: str | None = None) -> float:
        """Total duration of the kernels whose name contains ``name_contains`` (or, with
        ``op``, of the kernels that operator launched: :meth:`kernels_of`), microseconds."""
        kernels = self.kernels_of(op) if op is not None else self.kernels
        return sum(k.dur for k in kernels if name_contains in k.name)

    def roofline_fraction(
        self,
        name_contains: str,
        flops: float,
        nbytes: float,
        peak_tflops: float,
        memory_gb_s: float,
        *,
        op: str | None = None,
    ) -> float:
        """Achieved fraction of the roofline by the kernels whose name contains
        ``name_contains`` (with ``op``: among the kernels that operator launched,
        :meth:`kernels_of`; pass ``""`` to take them all): their FLOP/s (``flops`` over their
        total time) divided by what the roofline allows at their intensity,
        ``min(peak, flops / nbytes * bandwidth)``. Units: FLOP, bytes, TFLOP/s, GB/s.

        Find a kernel through its operator on real GPUs: cuBLAS names its GEMMs
        ``ampere_sgemm_*`` on an A100 but ``nvjet_*`` on an H100.

        Raises:
            ValueError: no such kernel in the trace.
        """
        seconds = self.kernel_time_us(name_contains, op=op) * 1e-6
        if seconds <= 0:
            what = f"launched by {op!r}" if op is not None else f"named like {name_contains!r}"
            raise ValueError(f"no kernel {what} in the trace")
        attainable = min(peak_tflops * 1e12, flops / nbytes * memory_gb_s * 1e9)
        return flops / seconds / attainable

    def span_us(self) -> float:
        """From the first GPU event's start to the last one's end, microseconds."""
        gpu = self.of(*GPU_CATS)
        return max(e.end for e in gpu) - min(e.ts for e in gpu) if gpu else 0.0

    def summary(self) -> dict:
        """Counts and times in one dict (for messages and notebooks)."""
        return {
            "kernels": len(self.kernels),
            "launches": self.launch_count,
            "copies": len(self.copies),
            "syncs": len(self.syncs),
            "cpu_ops": len(self.cpu_ops),
            "overlap_fraction": round(self.overlap_fraction(), 3),
            "gpu_span_us": round(self.span_us(), 1),
        }


def plot(trace: Trace, ax, title: str = "") -> None:
    """Draw a trace as lanes on a matplotlib axis: host runtime calls (synchronizations in
    red), then one lane per CUDA stream (kernels in blue, copies in orange).

    Args:
        trace: A parsed trace.
        ax: A matplotlib ``Axes``.
        title: Axis title (say which device the trace comes from).
    """
    gpu = trace.of(*GPU_CATS)
    host = trace.of(*HOST_CALL_CATS)
    t0 = min([e.ts for e in gpu + host], default=0.0)
    streams = sorted({e.stream for e in gpu if e.stream is not None})
    lanes = ["host: CUDA calls"] + [f"stream {s}" for s in streams]
    for e in host:
        color = "tab:red" if e.name in SYNC_CALLS else "tab:gray"
        ax.broken_barh([((e.ts - t0) / 1e3, max(e.dur, 0.5) / 1e3)], (0 - 0.4, 0.8), color=color,
                       edgecolor="white", linewidth=0.3)  # fmt: skip
    for e in gpu:
        row = 1 + streams.index(e.stream) if e.stream in streams else len(lanes)
        color = "tab:blue" if e.cat == "kernel" else "tab:orange"
        ax.broken_barh([((e.ts - t0) / 1e3, e.dur / 1e3)], (row - 0.4, 0.8), color=color,
                       edgecolor="white", linewidth=0.3)  # fmt: skip
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(title or "trace")
