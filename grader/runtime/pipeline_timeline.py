"""Per-rank timelines of a pipeline-parallel run, recorded inside the stage.

Used by 13_parallelism (section 3's demo and the recorded data of ``measured_bubble``'s check).
:class:`TimedStage` wraps the module a rank runs as its pipeline stage
(``torch.distributed.pipelining.PipelineStage``) and records, with ``time.perf_counter``
(``CLOCK_MONOTONIC`` on Linux: one clock for every process of the machine, so the ranks'
stamps compare):

* each micro-batch's **forward** on the stage: from the call of the wrapped module to its return;
* each micro-batch's **backward** on the stage: from the moment the gradient of the stage's
  output reaches it to the moment the gradient of its input (or of its first layer, on the first
  stage, whose input needs no gradient) has been computed. Two identity autograd functions mark
  these two moments; their backward runs when autograd reaches them, whatever schedule runs it;
* the **activations saved for backward** by the stage, in bytes, as they are held and freed
  (``torch.autograd.graph.saved_tensors_hooks``), and their peak; and the peak number of
  micro-batches whose forward has run and whose backward has not (**in flight**).

:func:`pipeline_rank` is a rank function for :func:`grader.runtime.distributed.run_ranks`: a
small MLP split into one stage per rank, one warm-up step and one recorded step of
``ScheduleGPipe`` or ``Schedule1F1B``; it returns plain data (intervals in seconds, bytes, the
loss). Imports only torch.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn


class _Mark(torch.autograd.Function):
    """Identity in forward; in backward, calls ``hook()`` when autograd reaches it."""

    @staticmethod
    def forward(ctx, x, anchor, hook):
        ctx.hook = hook
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        ctx.hook()
        return grad, None, None


class Tracker:
    """Counts, for one rank, the micro-batches in flight (forwarded through a stage, not yet
    backwarded) and the bytes of activations saved for backward, with their peaks. The
    :class:`TimedStage` chunks of one rank share one (interleaved schedules: a rank holds
    several)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Zero the counts and peaks."""
        self.in_flight = self.peak_in_flight = 0
        self.saved = self.peak_saved_bytes = 0

    def add_in_flight(self, n: int) -> None:
        self.in_flight += n
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def add_saved(self, nbytes: int) -> None:
        self.saved += nbytes
        self.peak_saved_bytes = max(self.peak_saved_bytes, self.saved)


class _Held:
    """A saved activation; counts its bytes while alive (parameters, which autograd also saves,
    are not activations: :meth:`TimedStage.forward` does not wrap them)."""

    __slots__ = ("tracker", "tensor", "nbytes")

    def __init__(self, tracker: Tracker, tensor: torch.Tensor) -> None:
        self.tracker, self.tensor = tracker, tensor
        self.nbytes = tensor.numel() * tensor.element_size()
        tracker.add_saved(self.nbytes)

    def __del__(self) -> None:
        self.tracker.add_saved(-self.nbytes)


class TimedStage(nn.Module):
    """Wraps a pipeline stage's module and records when each micro-batch runs through it.

    Args:
        inner: The stage's module (takes and returns one tensor).
        tracker: Counts in flight and saved bytes; share one between the chunks (virtual
            stages) of one rank. Default: a tracker of its own.
        chunk: This module's chunk number on its rank (0 unless interleaved), put in events.

    Attributes:
        events: ``{"kind": "F" | "B", "mb": k, "chunk": c, "start": s, "end": s}`` per forward
            or backward, ``time.perf_counter`` seconds, in the order they ended; ``mb`` counts
            the forward calls since :meth:`reset` (micro-batch index).
        peak_in_flight: Most micro-batches (of any chunk of the rank, with a shared tracker)
            forwarded and not yet backwarded at once.
        peak_saved_bytes: Most bytes of activations saved for backward held at once.
    """

    def __init__(self, inner: nn.Module, tracker: Tracker | None = None, chunk: int = 0) -> None:
        super().__init__()
        self.inner = inner
        self.tracker = tracker or Tracker()
        self.chunk = chunk
        self.reset()

    @property
    def peak_in_flight(self) -> int:
        return self.tracker.peak_in_flight

    @property
    def peak_saved_bytes(self) -> int:
        return self.tracker.peak_saved_bytes

    def reset(self) -> None:
        """Forget the recorded events and the tracker's peaks (e.g. after a warm-up step)."""
        self.events: list[dict] = []
        self._forwards = 0
        self.tracker.reset()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled():
            return self.inner(x)
        mb = self._forwards
        self._forwards += 1
        start = time.perf_counter()
        backward: dict = {"kind": "B", "mb": mb, "chunk": self.chunk}

        def backward_ends() -> None:
            backward["end"] = time.perf_counter()
            self.events.append(backward)
            self.tracker.add_in_flight(-1)

        def backward_starts() -> None:
            backward["start"] = time.perf_counter()

        anchor = torch.ones((), requires_grad=True)  # makes the marks part of the graph
        x = _Mark.apply(x, anchor, backward_ends)
        weights = {p.untyped_storage().data_ptr() for p in self.inner.parameters()}

        def pack(t: torch.Tensor):
            if t.untyped_storage().data_ptr() in weights:  # a weight (or its transpose)
                return t
            return _Held(self.tracker, t)

        def unpack(held):
            return held.tensor if isinstance(held, _Held) else held

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            y = self.inner(x)
        y = _Mark.apply(y, anchor, backward_starts)
        self.tracker.add_in_flight(1)
        self.events.append(
            {"kind": "F", "mb": mb, "chunk": self.chunk, "start": start, "end": time.perf_counter()}
        )
        return y


def mlp_stages(n_stages: int, width: int = 256, depth_per_stage: int = 2, seed: int = 0):
    """The same MLP for every layout: ``n_stages`` blocks of ``depth_per_stage`` Linear+ReLU
    layers (width ``width``), seeded.

    Returns:
        A list of ``n_stages`` ``nn.Sequential`` (float32).
    """
    torch.manual_seed(seed)
    return [
        nn.Sequential(
            *[m for _ in range(depth_per_stage) for m in (nn.Linear(width, width), nn.ReLU())]
        )
        for _ in range(n_stages)
    ]


def pipeline_rank(
    rank: int,
    world_size: int,
    runs: list[tuple[str, int]],
    batch: int = 256,
    width: int = 512,
    depth_per_stage: int = 4,
    steps: int = 3,
    virtual_stages: int = 2,
) -> list[dict]:
    """Rank function: an MLP split across the ranks (:func:`mlp_stages`), stepped by
    ``ScheduleGPipe``, ``Schedule1F1B`` or ``ScheduleInterleaved1F1B`` for each
    ``(schedule, n_microbatches)`` of ``runs``.

    GPipe and 1F1B: one stage of ``depth_per_stage`` layers a rank. Interleaved 1F1B:
    ``virtual_stages`` chunks of ``depth_per_stage // virtual_stages`` layers a rank, rank ``r``
    holding chunks ``r, r + world_size, ...``; the layers, in order, are the same in every layout
    (one seeded MLP), so every run computes the same loss.

    Each run takes ``steps`` steps on a ``(batch, width)`` float32 input split into
    ``n_microbatches`` micro-batches (MSE loss against a seeded target) and returns the recording
    of the step whose span (first start to last end on any rank) was shortest, the least
    disturbed by other processes sharing the machine's cores. The first step only warms up: on
    torch 2.14 a ``PipelineStage`` built without ``input_args`` infers its shapes in its first
    step with one more forward of its own, recorded as an extra forward with no backward (2.11
    does not; ``input_args`` is deprecated on both).

    Args:
        runs: ``[("gpipe" | "1f1b" | "interleaved_1f1b", n_microbatches), ...]``;
            ``n_microbatches`` divides ``batch`` (and is at least ``world_size`` for the 1F1B
            schedules, which PyTorch requires).
        virtual_stages: Chunks a rank for ``"interleaved_1f1b"``; divides ``depth_per_stage``.

    Returns:
        One dict a run: ``{"schedule", "m", "intervals": [(start, end), ...] (seconds,
        perf_counter), "events": [{"kind", "mb", "chunk", "start", "end"}, ...] (by start),
        "peak_in_flight": int (micro-batch chunks on this rank), "peak_saved_bytes": int,
        "loss": float | None (last rank only), "step_s": float}``.

    Raises:
        ValueError: ``virtual_stages`` does not divide ``depth_per_stage``.
    """
    from torch.distributed.pipelining import (
        PipelineStage,
        Schedule1F1B,
        ScheduleGPipe,
        ScheduleInterleaved1F1B,
    )

    v = virtual_stages
    if depth_per_stage % v:
        raise ValueError(f"virtual_stages={v} must divide depth_per_stage={depth_per_stage}")
    whole = mlp_stages(world_size, width, depth_per_stage)[rank]
    chunks = mlp_stages(world_size * v, width, depth_per_stage // v)[rank::world_size]
    g = torch.Generator().manual_seed(1)
    x, target = torch.randn(batch, width, generator=g), torch.randn(batch, width, generator=g)
    results = []
    for schedule, m in runs:
        tracker = Tracker()
        if schedule == "interleaved_1f1b":
            modules = [TimedStage(c, tracker, k) for k, c in enumerate(chunks)]
            stages = [
                PipelineStage(mod, rank + k * world_size, world_size * v, torch.device("cpu"))
                for k, mod in enumerate(modules)
            ]
            sched = ScheduleInterleaved1F1B(stages, m, loss_fn=nn.functional.mse_loss)
        else:
            modules = [TimedStage(whole, tracker)]
            stage = PipelineStage(modules[0], rank, world_size, torch.device("cpu"))
            kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
            sched = kind(stage, m, loss_fn=nn.functional.mse_loss)
        out: dict = {"schedule": schedule, "m": m}
        best = float("inf")
        for step in range(steps):
            for mod in modules:
                mod.reset()
                mod.zero_grad()
            dist.barrier()
            t0 = time.perf_counter()
            losses: list = []
            if rank == 0:
                sched.step(x)
            elif rank == world_size - 1:
                sched.step(target=target, losses=losses)
            else:
                sched.step()
            step_s = time.perf_counter() - t0
            events = sorted((e for mod in modules for e in mod.events), key=lambda e: e["start"])
            # The whole run's span (first start, last end on any rank): keep the step with the
            # shortest one, the least disturbed by other processes on the machine.
            ends = torch.tensor(
                [-events[0]["start"], max(e["end"] for e in events)], dtype=torch.float64
            )
            dist.all_reduce(ends, op=dist.ReduceOp.MAX)
            if step > 0 and ends.sum().item() < best:  # step 0 warms up (docstring)
                best = ends.sum().item()
                out["step_s"] = step_s
                out["loss"] = float(sum(t.detach() for t in losses) / m) if losses else None
                out["events"] = events
                out["intervals"] = [(e["start"], e["end"]) for e in events]
                out["peak_in_flight"] = tracker.peak_in_flight
                out["peak_saved_bytes"] = tracker.peak_saved_bytes
        results.append(out)
    return results


def record(path: str) -> dict:
    """Record the timelines that 13's ``measured_bubble`` check replays and write them as JSON.

    Runs :func:`pipeline_rank` on 2 gloo ranks (GPipe with m = 1, 2, 4, 8; 1F1B with m = 2, 4, 8)
    and on 4 (GPipe and 1F1B with m = 8), and writes ``{"about": ..., "runs": {"gpipe_p2_m4":
    {"0": [[start, end], ...], ...}, ...}}``: seconds from each run's first start, rounded to
    the microsecond.

    Returns:
        The JSON written, as a dict.
    """
    import datetime
    import json
    import os
    import platform

    from grader.runtime.distributed import run_ranks

    plan = {
        2: [
            ("gpipe", 1),
            ("gpipe", 2),
            ("gpipe", 4),
            ("gpipe", 8),
            ("1f1b", 2),
            ("1f1b", 4),
            ("1f1b", 8),
        ],
        4: [("gpipe", 8), ("1f1b", 8)],
    }
    runs = {}
    for ranks, todo in plan.items():
        results = run_ranks(pipeline_rank, ranks, todo, timeout_s=300)
        for i, (schedule, m) in enumerate(todo):
            t0 = min(s for r in results for s, _ in r[i]["intervals"])
            runs[f"{schedule}_p{ranks}_m{m}"] = {
                str(rank): [[round(s - t0, 6), round(e - t0, 6)] for s, e in r[i]["intervals"]]
                for rank, r in enumerate(results)
            }
    data = {
        "about": (
            "Per-rank busy intervals (forward and backward of each micro-batch on the rank's "
            "stage), seconds from the run's first start, recorded by "
            "grader.runtime.pipeline_timeline.record: torch.distributed.pipelining "
            "ScheduleGPipe/Schedule1F1B on gloo ranks started with fork, an MLP of "
            "4 Linear(512, 512)+ReLU a stage, batch 256, float32, one thread a rank; "
            f"torch {torch.__version__}, {platform.machine()} CPU with {os.cpu_count()} cores "
            "shared with other work, "
            f"{datetime.date.today().isoformat()}."
        ),
        "runs": runs,
    }
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    return data


if __name__ == "__main__":
    import sys

    record(sys.argv[1])
