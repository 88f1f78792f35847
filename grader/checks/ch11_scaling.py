"""Checks for 11_scaling: BucketedDDP, ShardedOptimizer, activation_bytes, zero_memory_bytes.

Everything graded runs on the CPU with the gloo backend, in real separate processes started by
the course's launcher (:func:`grader.runtime.distributed.run_ranks`: a deadline on every run, so an
answer whose ranks wait forever in a collective fails with a clear message within seconds).

The checks reach the student's code through :mod:`grader.runtime.remote`: the ranks that build the
student's ``BucketedDDP`` or ``ShardedOptimizer`` run in the student's process (the
``_probe_*`` functions) and hand back plain data: gradients, parameters, the bytes of optimizer
state each rank holds, and a **timeline** of each rank (:class:`CommTimeline`): the order in
which gradients became ready during backward and collectives were started and completed,
recorded by course code at the dispatcher, below anything the student's code calls
(:mod:`grader.runtime.collectives`, re-exported here). Overlap is
judged by ordering, not by durations: in each step of a ``BucketedDDP`` run all ranks but one
are held back until that one has every gradient (:func:`_rank_bucketed`), so none of its
all-reduces can complete before its last gradient unless its backward waited for one. The single-process full-batch
gradients, the unsharded optimizer's parameters, the measured activation memory and every
verdict are computed here, in the grading process.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from grader.checks.common import call_student, fail, not_attempted, passed, require
from grader.runtime.collectives import (  # noqa: F401 - re-exported: 11's notebook imports them
    CommTimeline,
    _argument,
    _stamp_completion,
    _tensors,
    warm_up_timeline,
)
from grader.runtime.collectives import is_all_reduce as _is_all_reduce
from grader.runtime.course import reference
from grader.runtime.distributed import RanksFailed, default_start_method, run_ranks
from grader.runtime.remote import Recorded, attempt_all, student

ASSIGNMENT = "11_scaling"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True

#: How a rank's traceback ends when the exercise's stub raised (a bare NotImplementedError).
_STUB = re.compile(r"raise NotImplementedError\(\)|^NotImplementedError\s*$", re.MULTILINE)


def rank_deadline_s() -> float:
    """Deadline of a checked run of 2 ranks, seconds: forked ranks of these tiny models finish
    in about a second, so a rank still waiting after 15 s waits for a collective that another
    rank never calls; spawned ranks (machines with a GPU) first import torch, so they get 90 s."""
    return 15.0 if default_start_method() == "fork" else 90.0


def _ranks_failed(what: str, text: str, label: str) -> None:
    if _STUB.search(text):
        raise not_attempted(label) from None
    hung = "had not finished at the deadline" in text
    fail(
        what,
        yours=text[-1500:],
        expected="every rank finishes without error",
        cause="a rank waited in a collective that another rank never called: every rank must "
        "call the same collectives, in the same order, with the same sizes (e.g. "
        "dist.broadcast is called by every rank, the sender and the receivers)"
        if hung
        else "read the rank's traceback above",
    )


# --------------------------------------------------------------------------- BucketedDDP
def ddp_test_model(widths: list[int], seed: int) -> nn.Sequential:
    """Linear layers of the given widths with Tanh between them (float32, seeded)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def _ddp_data(widths: list[int], n: int, seed: int):
    g = torch.Generator().manual_seed(seed + 100)
    return torch.randn(n, widths[0], generator=g), torch.randn(n, widths[-1], generator=g)


_DDP_LR = 0.1


def hold_seconds() -> float:
    """How long a held rank waits for the checked rank's last gradient (see
    :func:`_rank_bucketed`): the checked rank's whole backward of these tiny models takes
    milliseconds, so 3 s (20 s for spawned ranks on a GPU machine, whose first backward may
    initialise CUDA libraries) is only ever reached when the checked rank's backward waits
    for the held rank."""
    return 3.0 if default_start_method() == "fork" else 20.0


_HOLD_FAILED = "course_check/hold_timed_out"


def _hold_key(step: int) -> str:
    return f"course_check/last_gradient/step{step}"


def _rank_bucketed(rank, world_size, cls, widths, seed, x, y, bucket_bytes, steps, device, hold_s):
    """One rank: wrap the test model in the student's class, run ``steps`` steps of plain SGD
    on this rank's slice of ``(x, y)`` under a :class:`CommTimeline` (with completions); return
    the gradients after ``finish_gradient_synchronization`` at every step and the timeline.

    In step ``s`` rank ``s % world_size`` is *checked* and the others are *held*: a held rank,
    when its first gradient of the step is ready (before its hooks can start any all-reduce),
    waits until the checked rank has every gradient of the step (a key in the process group's
    store, set by the checked rank's course hook of its last gradient), or ``hold_s`` seconds.
    No all-reduce of the checked rank can complete before the held ranks join it, so in a
    wrapper whose backward goes on while its all-reduces run, every all-reduce the checked rank
    starts before its last gradient completes after it; a hook that waits for one stalls the
    checked rank's backward until the hold times out, and the timeline shows that all-reduce
    completed before later gradients were ready."""
    if device == "cuda":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    store = dist.distributed_c10d._get_default_store()
    # A first collective outside the timeline: NCCL creates its communicator there (a call
    # every rank must make), not inside a held step.
    dist.all_reduce(torch.zeros(1, device=device))
    model = ddp_test_model(widths, seed).to(device)
    timeline = CommTimeline(completions=True)
    names = {id(p): n for n, p in model.named_parameters()}
    n_params = len(names)
    now = {"step": 0, "ready": 0}

    def grad_ready(q: torch.Tensor) -> None:
        timeline.mark("grad", name=names[id(q)], bytes=q.numel() * q.element_size())
        now["ready"] += 1
        step, checked = now["step"], now["step"] % world_size
        if rank == checked and now["ready"] == n_params:
            store.set(_hold_key(step), "ready")
        elif rank != checked and now["ready"] == 1 and not store.check([_HOLD_FAILED]):
            start = time.perf_counter_ns()
            try:
                store.wait([_hold_key(step)], timedelta(seconds=hold_s))
                released = True
            except RuntimeError:  # the checked rank did not get there in time
                released = False
                store.set(_HOLD_FAILED, "yes")  # seen once is enough: no more holds this run
            timeline.mark(
                "held", checked=checked, released=released, waited_ns=time.perf_counter_ns() - start
            )

    for p in model.parameters():  # registered first: runs before the student's hook of p
        p.register_post_accumulate_grad_hook(grad_ready)
    per_rank = len(x) // world_size
    part = slice(rank * per_rank, (rank + 1) * per_rank)
    xs, ys = x[part].to(device), y[part].to(device)
    grads = []
    with timeline:
        ddp = cls(model, bucket_bytes)
        for step in range(steps):
            now.update(step=step, ready=0)
            timeline.mark("step", step=step)
            loss = F.mse_loss(ddp(xs), ys)
            loss.backward()
            timeline.mark("backward_end")
            ddp.finish_gradient_synchronization()
            timeline.mark("synchronized")
            grads.append(
                {
                    n: None if p.grad is None else p.grad.detach().cpu().clone()
                    for n, p in model.named_parameters()
                }
            )
            with torch.no_grad():
                for p in model.parameters():
                    if p.grad is not None:
                        p -= _DDP_LR * p.grad
            model.zero_grad(set_to_none=True)
    return {"grads": grads, "timeline": timeline.events}


def _probe_bucketed_ddp(
    cls, world_size, widths, seed, x, y, bucket_bytes, steps, backend="gloo"
) -> dict:
    """Probe: start ``world_size`` ranks from the student's process (the course's launcher,
    with a deadline), each running :func:`_rank_bucketed` with the student's class; hand back
    every rank's gradients and timeline, or the launcher's report of a failed rank."""
    device = "cuda" if backend == "nccl" else "cpu"
    warm_up_timeline()
    hold_s = hold_seconds()
    try:
        results = run_ranks(
            _rank_bucketed,
            world_size,
            cls,
            widths,
            seed,
            x,
            y,
            bucket_bytes,
            steps,
            device,
            hold_s,
            backend=backend,
            timeout_s=rank_deadline_s() + steps * hold_s,
        )
    except Exception as exc:  # noqa: BLE001 - a rank failed, or the class could not be sent
        return {
            "failed": str(exc) if isinstance(exc, RanksFailed) else f"{type(exc).__name__}: {exc}"
        }
    return {"ranks": results, "hold_s": hold_s}


def single_process_gradients(widths, seed, x, y, steps) -> list[dict]:
    """What every rank must hold after each step: the gradients of one process on the full
    batch, with the same plain SGD updates between steps."""
    model = ddp_test_model(widths, seed)
    out = []
    for _ in range(steps):
        F.mse_loss(model(x), y).backward()
        out.append({n: p.grad.clone() for n, p in model.named_parameters()})
        with torch.no_grad():
            for p in model.parameters():
                p -= _DDP_LR * p.grad
        model.zero_grad(set_to_none=True)
    return out


def greedy_buckets(sizes: list[int], bucket_bytes: int) -> list[int]:
    """Bucket sizes (bytes) of a greedy packing of gradients of ``sizes`` bytes, in order."""
    buckets: list[int] = []
    for size in sizes:
        if buckets and buckets[-1] + size <= bucket_bytes:
            buckets[-1] += size
        else:
            buckets.append(size)
    return buckets


def _buckets_counting_elements(param_bytes: list[int], bucket_bytes: int) -> list[list[int]]:
    """The bucket sizes (bytes, in the order backward fills them) of an answer that compares
    ``bucket_bytes`` with numbers of float32 elements, packing in reverse or forward order."""
    elements = [b // 4 for b in param_bytes]
    backward = [4 * b for b in greedy_buckets(list(reversed(elements)), bucket_bytes)]
    forward = [4 * b for b in reversed(greedy_buckets(elements, bucket_bytes))]
    return [backward, forward]


def _steps_of(events: list[dict]) -> list[list[dict]]:
    steps: list[list[dict]] = []
    for event in events:
        if event["kind"] == "step":
            steps.append([])
        elif steps:
            steps[-1].append(event)
    return steps


def _check_timeline(rank: int, events: list[dict], param_bytes: list[int], bucket_bytes: int):
    total = sum(param_bytes)
    for step, step_events in enumerate(_steps_of(events)):
        where = f"rank {rank}, step {step}"
        kinds = [e["kind"] for e in step_events]
        end = kinds.index("backward_end") if "backward_end" in kinds else len(kinds)
        reduces = [(i, e) for i, e in enumerate(step_events) if _is_all_reduce(e)]
        sizes = [e["bytes"] for _, e in reduces]
        require(
            sum(sizes) == total,
            f"{where}: bytes all-reduced in the step (every gradient once: {total} bytes)",
            yours=f"{sum(sizes)} bytes in {len(sizes)} all-reduce(s)",
            expected=f"{total} bytes",
            cause="all-reduce every gradient exactly once per step (reset your bucket "
            "counters in finish_gradient_synchronization, so the next step sends again)"
            if sum(sizes) < total
            else "all-reduce every gradient exactly once per step",
        )
        too_big = [s for s in sizes if s > bucket_bytes and s not in param_bytes]
        require(
            not too_big,
            f"{where}: size of each all-reduce, bucket_bytes={bucket_bytes}",
            yours=sizes,
            expected=f"each <= {bucket_bytes} bytes, unless it holds one parameter larger "
            "than that",
            cause="bucket_bytes counts bytes: a gradient takes p.numel() * "
            "p.element_size() bytes (4 per number in float32), not p.numel()"
            if too_big and sizes in _buckets_counting_elements(param_bytes, bucket_bytes)
            else "close a bucket before adding a gradient that would make it exceed "
            "bucket_bytes; a parameter larger than bucket_bytes gets a bucket of its own",
        )
        for a, b in zip(sizes, sizes[1:]):
            require(
                a + b > bucket_bytes,
                f"{where}: two consecutive all-reduces that fit in one bucket "
                f"(bucket_bytes={bucket_bytes})",
                yours=sizes,
                expected="buckets filled up to bucket_bytes: every pair of consecutive "
                "buckets together exceeds it",
                cause=f"a bucket may hold exactly bucket_bytes: add a gradient while the "
                f"bucket's bytes stay <= bucket_bytes ({a} + {b} = {bucket_bytes}), not < "
                "bucket_bytes"
                if a + b == bucket_bytes
                else "group several gradients into one flat buffer and all-reduce the "
                "buffer once (one all-reduce per parameter pays the latency of each call)",
            )
        packed = greedy_buckets(list(reversed(param_bytes)), bucket_bytes)
        require(
            sorted(sizes) == sorted(packed),
            f"{where}: the buckets' sizes (bucket_bytes={bucket_bytes}; parameters of "
            f"{param_bytes} bytes, in the order of module.parameters())",
            yours=sizes,
            expected=f"{packed} (in any order)",
            cause="pack the buckets in reverse order of module.parameters(), the order backward "
            "produces the gradients (last layer first): reversed(list(...)), filling each "
            "bucket greedily"
            if sorted(sizes) == sorted(greedy_buckets(param_bytes, bucket_bytes))
            else "fill the buckets greedily in reverse order of module.parameters(): add a "
            "gradient while the bucket stays <= bucket_bytes, else start a new bucket",
        )
        grads = [i for i, e in enumerate(step_events) if e["kind"] == "grad"]
        late = [i for i, _ in reduces if i > end]
        require(
            not late,
            f"{where}: all-reduces started after backward had returned",
            yours=f"{len(late)} of {len(reduces)} started in finish_gradient_synchronization",
            expected="every bucket's all-reduce started from a gradient hook, during backward",
            cause="start each bucket's all-reduce (async_op=True) in a "
            "register_post_accumulate_grad_hook as soon as its last gradient is ready; only "
            "wait for them in finish_gradient_synchronization",
        )
        blocking = [e for _, e in reduces if e.get("async_op") is False]
        require(
            not blocking,
            f"{where}: all-reduces started with async_op=False",
            yours=f"{len(blocking)} of {len(reduces)} all-reduces blocked backward until done",
            expected="dist.all_reduce(buffer, async_op=True): backward goes on while it runs",
            cause="start each bucket with async_op=True, keep the returned Work, and call "
            "work.wait() only in finish_gradient_synchronization",
        )
        n_buckets = len(greedy_buckets(list(reversed(param_bytes)), bucket_bytes))
        if n_buckets > 1 and grads and reduces:
            require(
                reduces[0][0] < grads[-1],
                f"{where}: overlap of communication with backward (order of events)",
                yours="the first all-reduce started after the last gradient was computed",
                expected="the first bucket's all-reduce started while backward still computes "
                "the gradients of earlier layers",
                cause="build buckets in the order backward produces gradients (last layer "
                "first: reversed(list(model.parameters()))) and send each bucket as soon as "
                "it is full",
            )


def _check_overlap(results: list[dict], hold_s: float) -> None:
    """In step ``s`` rank ``s % world_size`` was checked while the others were held back until
    it had every gradient (:func:`_rank_bucketed`): none of its all-reduces started before its
    last gradient may have completed before that gradient was ready, and no held rank may have
    stopped waiting at the end of the hold."""
    world_size = len(results)
    steps = [_steps_of(r["timeline"]) for r in results]
    for step in range(min(len(s) for s in steps)):
        checked = step % world_size
        events = steps[checked][step]
        grads = [(i, e) for i, e in enumerate(events) if e["kind"] == "grad"]
        if not grads:
            continue
        last_i, last = grads[-1]
        early_done = [
            (i, e)
            for i, e in enumerate(events[:last_i])
            if _is_all_reduce(e) and e.get("done_ns", last["t_ns"]) < last["t_ns"]
        ]
        held = [
            (r, e)
            for r in range(world_size)
            if r != checked
            for e in steps[r][step]
            if e["kind"] == "held" and not e["released"]
        ]
        if not early_done and not held:
            continue
        who = ", ".join(str(r) for r in range(world_size) if r != checked)
        ranks = f"rank{'s' if world_size > 2 else ''} {who}"
        if early_done:
            i, reduce = early_done[0]
            before = [e["name"] for e in events[:i] if e["kind"] == "grad"]
            after = next(e["name"] for _, e in grads if e["t_ns"] > reduce["done_ns"])
            yours = (
                f"the all-reduce of {reduce['bytes']} bytes (started when the gradient of "
                f"{before[-1] if before else '(none)'} was ready) had completed before the "
                f"gradient of {after} was ready"
            )
        else:
            yours = (
                f"rank {checked} had its last gradient ({last['name']}) only after "
                f"{ranks} had stopped waiting for it ({hold_s:g} s)"
            )
        fail(
            f"rank {checked}, step {step}: backward going on while the all-reduces run "
            f"({ranks} held back until rank {checked} had every gradient)",
            yours=yours,
            expected=f"every all-reduce started during backward still running when rank "
            f"{checked}'s last gradient is ready: {ranks} had not joined it yet, so it can "
            f"complete earlier only if rank {checked}'s backward stood still, waiting for it, "
            f"until the hold ended after {hold_s:g} s",
            cause="a hook waited for an all-reduce (work.wait() right after starting it, a "
            "wait for the previous bucket's work, or another blocking call), so backward "
            "computed nothing while it ran: keep each bucket's Work and call wait() only in "
            "finish_gradient_synchronization",
        )


def _check_bucketed(cls, widths, bucket_bytes, seed, steps=2, world_size=2, backend="gloo"):
    x, y = _ddp_data(widths, 4 * world_size, seed)
    seen = cls.probe(
        _probe_bucketed_ddp, world_size, widths, seed, x, y, bucket_bytes, steps, backend
    )
    what = f"BucketedDDP in {world_size} {backend} processes, bucket_bytes={bucket_bytes}"
    if "failed" in seen:
        _ranks_failed(what, seen["failed"], "BucketedDDP")
    expected = single_process_gradients(widths, seed, x, y, steps)
    tol = 1e-6 if backend == "gloo" else 1e-5  # GPU kernels round differently from the CPU
    model = ddp_test_model(widths, seed)
    param_bytes = [p.numel() * p.element_size() for p in model.parameters()]
    for rank, result in enumerate(seen["ranks"]):
        for step, (got, want) in enumerate(zip(result["grads"], expected)):
            for name, w in want.items():
                g = got.get(name)
                if g is not None and g.shape == w.shape and torch.allclose(g, w, atol=tol):
                    continue
                ratio = (g.norm() / w.norm()).item() if g is not None and g.shape == w.shape else 0
                divisor = world_size / ratio if ratio else 0
                if abs(ratio - world_size) < 1e-3:
                    cause = f"divide the all-reduced sum by the world size ({world_size})"
                elif divisor > 1.5 and abs(divisor - round(divisor)) < 1e-3:
                    cause = (
                        f"you divided the sum by {round(divisor)}: divide by the world size, "
                        f"dist.get_world_size() ({world_size} here), not a fixed number"
                    )
                elif step > 0:
                    cause = (
                        "the first step was right, a later one is not: reset what "
                        "finish_gradient_synchronization uses (ready counters, pending works) "
                        "for the next step, and read p.grad anew every step (optimizers may "
                        "set it to None)"
                    )
                else:
                    cause = (
                        "wait for every all-reduce (work.wait()) before copying the averaged "
                        "buffer back into each parameter's .grad"
                    )
                fail(
                    f"{what}: rank {rank}, step {step}: gradient of {name} after "
                    "finish_gradient_synchronization, vs one process on the full batch",
                    yours=None if g is None else f"norm {g.norm().item():.6f}",
                    expected=f"norm {w.norm().item():.6f}",
                    cause=cause,
                )
        _check_timeline(rank, result["timeline"], param_bytes, bucket_bytes)
    _check_overlap(seen["ranks"], seen["hold_s"])


#: The public check's model: parameters of 1024, 128, 4096, 128, 512 and 16 bytes.
DDP_WIDTHS = [8, 32, 32, 4]


def check_bucketed_ddp(BucketedDDP) -> None:  # noqa: N803 - the exercise's class name
    """Two gloo ranks, each with half a batch, two SGD steps: after
    ``finish_gradient_synchronization`` every rank holds the full-batch gradient; from each
    rank's recorded timeline, every all-reduce started during backward, the first one before
    the last gradient was computed, each at most ``bucket_bytes`` (unless one parameter is
    larger) and consecutive buckets full; and backward went on while the all-reduces ran: in
    each step one rank is held back until the other has every gradient, and none of the
    other's all-reduces may complete before its last gradient is ready.

    Raises:
        CheckFailed: wrong gradients, all-reduces after backward, buckets too large or not
            filled, an all-reduce waited for during backward, or a rank raised or hung.
    """
    cls = student(BucketedDDP, "BucketedDDP")
    _check_bucketed(cls, DDP_WIDTHS, bucket_bytes=2000, seed=0)
    passed(
        "BucketedDDP: full-batch gradients on every rank, buckets within bucket_bytes, "
        "all-reduces started during backward and still running while it went on (2 gloo "
        "processes)"
    )


def check_bucketed_ddp_hidden(BucketedDDP) -> None:  # noqa: N803
    """Three ranks (the average divides by 3) with parameters larger than a bucket; a bucket
    that fits exactly (``bucket_bytes`` = 16 + 512 + 128 bytes); one bucket for all."""
    cls = student(BucketedDDP, "BucketedDDP")
    _check_bucketed(cls, [6, 16, 24, 8, 2], bucket_bytes=600, seed=1, world_size=3)
    _check_bucketed(cls, DDP_WIDTHS, bucket_bytes=656, seed=3, steps=1)
    _check_bucketed(cls, DDP_WIDTHS, bucket_bytes=10**6, seed=2, steps=1)
    # packed from the last parameter: 872, 96, 1536, 448 bytes; from the first: 448, 1536, 896, 72
    _check_bucketed(cls, [6, 16, 24, 8, 2], bucket_bytes=900, seed=4, steps=1)
    passed(
        "BucketedDDP averages over 3 ranks, fills a bucket to exactly bucket_bytes, handles "
        "parameters larger than a bucket and one bucket for all"
    )


# --------------------------------------------------------------------------- ShardedOptimizer
#: The public check's model: parameter tensors of 512, 32, 1024, 32, 1024, 32, 256, 8 numbers.
ZERO_WIDTHS = [16, 32, 32, 32, 8]
#: Its second model: four layers of 256 + 16 numbers, then four tiny ones (32 + 2, 4 + 2, ...):
#: the first half of the parameter list holds 1088 of the 1140 numbers, so shards of equal
#: *count* are far from equal in bytes (a model whose halves weigh the same hides that).
ZERO_UNBALANCED_WIDTHS = [16, 16, 16, 16, 16, 2, 2, 2, 2]
_ZERO_STEPS = 3


def _zero_data(widths, seed):
    g = torch.Generator().manual_seed(seed + 200)
    return torch.randn(16, widths[0], generator=g), torch.randn(16, widths[-1], generator=g)


def _children(obj) -> list:
    """What :func:`_state_bytes` walks into from ``obj``: attributes, container items, an
    optimizer's ``state`` and ``param_groups`` (modules, classes and leaves: nothing)."""
    if isinstance(obj, dict):
        return list(obj.values()) + list(obj.keys())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)
    if isinstance(obj, torch.optim.Optimizer):
        return [dict(obj.state), obj.param_groups, vars(obj)]
    if hasattr(obj, "__dict__") and not isinstance(obj, (type, nn.Module, torch.Tensor)):
        return list(vars(obj).values())
    return []


def _state_bytes(obj, params: set[int], seen: set[int], storages: set[int], depth: int = 0) -> int:
    """Bytes of the distinct tensors reachable from ``obj`` (attributes, containers, an
    optimizer's ``state``), parameters, their gradients and 0-d tensors (Adam's step counts)
    excluded."""
    if depth > 6 or id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        key = obj.untyped_storage().data_ptr()
        if obj.dim() == 0 or key in params or key in storages:
            return 0
        storages.add(key)
        return obj.untyped_storage().nbytes()
    return sum(_state_bytes(item, params, seen, storages, depth + 1) for item in _children(obj))


def _stepped_storages(obj, seen: set[int] | None = None, depth: int = 0) -> set[int]:
    """Storages of the tensors that the optimizers reachable from ``obj`` update (their
    ``param_groups``) and of those tensors' gradients: what an optimizer steps is a parameter
    (the model's own, or a shard of them flattened into one tensor), not optimizer state."""
    seen = set() if seen is None else seen
    if depth > 6 or id(obj) in seen or isinstance(obj, torch.Tensor):
        return set()
    seen.add(id(obj))
    found: set[int] = set()
    if isinstance(obj, torch.optim.Optimizer):
        for group in obj.param_groups:
            for p in group["params"]:
                found.add(p.untyped_storage().data_ptr())
                if p.grad is not None:
                    found.add(p.grad.untyped_storage().data_ptr())
    for item in _children(obj):
        found |= _stepped_storages(item, seen, depth + 1)
    return found


def _rank_sharded(rank, world_size, cls, optimizer_name, kwargs, widths, seed, x, y, device):
    """One rank: every rank computes the gradient of the full batch (what DDP leaves), then
    the student's sharded optimizer steps; return the parameters and the optimizer-state
    bytes this rank holds."""
    if device == "cuda":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    model = ddp_test_model(widths, seed).to(device)
    x, y = x.to(device), y.to(device)
    optimizer = cls(model.parameters(), getattr(torch.optim, optimizer_name), **kwargs)
    for _ in range(_ZERO_STEPS):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    params |= {
        p.grad.untyped_storage().data_ptr() for p in model.parameters() if p.grad is not None
    }
    params |= _stepped_storages(optimizer)
    result = {
        "params": {n: p.detach().cpu().clone() for n, p in model.named_parameters()},
        "state_bytes": _state_bytes(optimizer, params, set(), set()),
    }
    # zero_grad must clear every parameter's gradient (every rank computed all of them), in
    # both of its modes; what is left in .grad after it is handed back.
    not_cleared, wrong_mode = {}, {}
    for label, kwargs in (
        ("zero_grad()", {}),
        ("zero_grad(set_to_none=False)", {"set_to_none": False}),
    ):
        F.mse_loss(model(x), y).backward()
        optimizer.zero_grad(**kwargs)
        not_cleared[label] = [
            n
            for n, p in model.named_parameters()
            if p.grad is not None and bool(p.grad.ne(0).any())
        ]
        # set_to_none=True (the default) leaves None; set_to_none=False zero tensors
        to_none = kwargs.get("set_to_none", True)
        wrong_mode[label] = [
            n for n, p in model.named_parameters() if (p.grad is None) is not to_none
        ]
    result["not_cleared"] = not_cleared
    result["wrong_mode"] = wrong_mode
    result["n_params"] = len(list(model.parameters()))
    return result


def _probe_sharded(
    cls, world_size, optimizer_name, kwargs, widths, seed, x, y, backend="gloo"
) -> dict:
    """Probe: start ``world_size`` ranks (course launcher, with a deadline) running
    :func:`_rank_sharded` with the student's class; hand back what each rank reports."""
    device = "cuda" if backend == "nccl" else "cpu"
    warm_up_timeline()  # also what an optimizer's first step imports (torch._dynamo)
    try:
        results = run_ranks(
            _rank_sharded,
            world_size,
            cls,
            optimizer_name,
            kwargs,
            widths,
            seed,
            x,
            y,
            device,
            backend=backend,
            timeout_s=rank_deadline_s(),
        )
    except Exception as exc:  # noqa: BLE001
        return {
            "failed": str(exc) if isinstance(exc, RanksFailed) else f"{type(exc).__name__}: {exc}"
        }
    return {"ranks": results}


def unsharded_training(optimizer_name, kwargs, widths, seed, x, y) -> tuple[dict, int]:
    """Parameters after the same steps with one unsharded optimizer, and its state bytes."""
    model = ddp_test_model(widths, seed)
    optimizer = getattr(torch.optim, optimizer_name)(model.parameters(), **kwargs)
    for _ in range(_ZERO_STEPS):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    state = sum(
        v.numel() * v.element_size()
        for s in optimizer.state.values()
        for v in s.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    )
    return dict(model.named_parameters()), state


def _check_sharded(cls, optimizer_name, kwargs, widths, seed, world_size=2, backend="gloo"):
    x, y = _zero_data(widths, seed)
    seen = cls.probe(
        _probe_sharded, world_size, optimizer_name, kwargs, widths, seed, x, y, backend
    )
    what = (
        f"ShardedOptimizer(params, torch.optim.{optimizer_name}) in {world_size} processes, "
        f"model of Linear layers of widths {widths}"
    )
    if "failed" in seen:
        _ranks_failed(what, seen["failed"], "ShardedOptimizer")
    want, full_state = unsharded_training(optimizer_name, kwargs, widths, seed, x, y)
    tol = 1e-6 if backend == "gloo" else 1e-5
    per_param_state = [2 * p.numel() * p.element_size() for p in want.values()]
    for rank, result in enumerate(seen["ranks"]):
        for name, w in want.items():
            g = result["params"].get(name)
            require(
                g is not None and g.shape == w.shape and torch.allclose(g, w.detach(), atol=tol),
                f"{what}: rank {rank}: {name} after {_ZERO_STEPS} steps, vs one unsharded "
                f"torch.optim.{optimizer_name}",
                yours=None
                if g is None
                else f"largest difference {(g - w.detach()).abs().max().item():.3g}",
                expected=f"equal (largest difference <= {tol:g})",
                cause="after updating its shard, each parameter must reach every rank: "
                "dist.broadcast(p.data, src=<the rank that owns p>) on every rank, for every "
                "parameter",
            )
    held = [r["state_bytes"] for r in seen["ranks"]]
    limit = full_state / world_size + max(per_param_state)
    require(
        max(held) <= limit,
        f"{what}: optimizer-state bytes each rank holds (unsharded: {full_state} bytes)",
        yours=held,
        expected=f"each at most {full_state}/{world_size} + the state of the largest "
        f"parameter = {limit:.0f} bytes",
        cause=f"every rank must own a share: deal the parameters over all "
        f"dist.get_world_size() ranks ({world_size} here), not over a fixed number of them "
        f"(rank{'s' if held.count(0) > 1 else ''} "
        f"{', '.join(str(r) for r, h in enumerate(held) if h == 0)} "
        f"own{'' if held.count(0) > 1 else 's'} nothing)"
        if 0 in held and len(held) > 1
        else "keep state only for this rank's shard (build the inner optimizer on the "
        "parameters this rank owns), and balance the shards by bytes, not by parameter count "
        "or position (weights and biases differ in size)"
        if sum(held) < full_state * 1.5
        else "build the inner optimizer on this rank's shard of the parameters only, not on "
        "all of them",
    )
    require(
        sum(held) >= full_state,
        f"{what}: optimizer-state bytes over all ranks",
        yours=held,
        expected=f"together at least the unsharded {full_state} bytes (every parameter's "
        "state on some rank)",
        cause="give every parameter to exactly one rank",
    )
    for rank, result in enumerate(seen["ranks"]):
        for call, names in result["not_cleared"].items():
            require(
                not names,
                f"{what}: rank {rank}: the gradients left after ShardedOptimizer.{call}, "
                "following a backward that gave every parameter a gradient",
                yours=f"{len(names)} of {result['n_params']} parameters still hold a "
                f"nonzero .grad: {', '.join(names[:6])}{', ...' if len(names) > 6 else ''}",
                expected="no gradient left: every parameter's .grad None (zero_grad()) or all "
                "zeros (zero_grad(set_to_none=False))",
                cause="clear the gradients of all the parameters, not only this rank's shard: "
                "the inner optimizer's zero_grad knows only the parameters it was built on, but "
                "every rank's backward computes the gradient of every parameter, and what is "
                "left in .grad adds up with the next step's (and holds memory)"
                if len(names) < result["n_params"]
                else "zero_grad must clear every parameter's .grad: set it to None, or with "
                "set_to_none=False zero it in place (p.grad.zero_())",
            )
        for call, names in result["wrong_mode"].items():
            to_none = call == "zero_grad()"
            require(
                not names,
                f"{what}: rank {rank}: the gradients after ShardedOptimizer.{call}",
                yours=f"{len(names)} of {result['n_params']} parameters' .grad "
                + ("zero tensors" if to_none else "set to None"),
                expected="every .grad None" if to_none else "every .grad a tensor of zeros",
                cause="follow set_to_none as torch.optim does: zero_grad() (set_to_none=True) "
                "sets each .grad to None, zero_grad(set_to_none=False) zeroes it in place "
                "(p.grad.zero_())",
            )


def check_sharded_optimizer(ShardedOptimizer) -> None:  # noqa: N803 - the exercise's class name
    """Two gloo ranks, three steps of Adam on the same gradients, for two models (one whose
    parameter list is front-heavy, so equal counts are unequal bytes): every rank's parameters
    equal those of one unsharded Adam, each rank holds about half of the optimizer state (bytes
    of the tensors its optimizer keeps, counted here), and after ``zero_grad()`` and
    ``zero_grad(set_to_none=False)`` no parameter holds a nonzero gradient.

    Raises:
        CheckFailed: parameters differ, a rank holds too much state, gradients left after
            zero_grad, or a rank raised or hung.
    """
    cls = student(ShardedOptimizer, "ShardedOptimizer")
    _check_sharded(cls, "Adam", {"lr": 0.01}, ZERO_WIDTHS, seed=0)
    _check_sharded(cls, "Adam", {"lr": 0.01}, ZERO_UNBALANCED_WIDTHS, seed=4)
    passed(
        "ShardedOptimizer: parameters equal unsharded Adam, each rank holds its share of the "
        "state in bytes (also when the parameter list is front-heavy), zero_grad clears every "
        "gradient (2 gloo processes)"
    )


def check_sharded_optimizer_hidden(ShardedOptimizer) -> None:  # noqa: N803
    """AdamW with weight decay and another model; and 3 ranks (each owns about a third)."""
    cls = student(ShardedOptimizer, "ShardedOptimizer")
    _check_sharded(cls, "AdamW", {"lr": 0.02, "weight_decay": 0.1}, [12, 24, 24, 24, 6], seed=1)
    _check_sharded(cls, "AdamW", {"lr": 0.02, "weight_decay": 0.1}, [12] * 9, seed=5, world_size=3)
    passed("ShardedOptimizer matches unsharded AdamW, on 2 and on 3 ranks")


# --------------------------------------------------------------------------- activation_bytes
class MLPBlock(nn.Module):
    """A transformer's MLP: Linear(d, 4d), GELU, Linear(4d, d)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.up = nn.Linear(d_model, 4 * d_model)
        self.down = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


def run_blocks(blocks, x: torch.Tensor, checkpoint: bool = False) -> torch.Tensor:
    """Apply ``blocks`` in order, each wrapped in ``torch.utils.checkpoint.checkpoint``
    (non-reentrant) when ``checkpoint``."""
    from torch.utils.checkpoint import checkpoint as ckpt

    for block in blocks:
        x = ckpt(block, x, use_reentrant=False) if checkpoint else block(x)
    return x


def measure_saved_bytes(blocks, x: torch.Tensor, checkpoint: bool = False) -> int:
    """Bytes of the distinct storages autograd saves for backward during ``run_blocks``
    (``torch.autograd.graph.saved_tensors_hooks``), parameters excluded: the activation memory
    held between forward and backward."""
    params = {p.untyped_storage().data_ptr() for p in blocks.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run_blocks(blocks, x, checkpoint)
    del out
    return sum(saved.values())


def measured_activation_bytes(batch, d_model, n_blocks, dtype, checkpoint) -> int:
    """:func:`measure_saved_bytes` on freshly built blocks."""
    torch.manual_seed(0)
    blocks = nn.Sequential(*(MLPBlock(d_model) for _ in range(n_blocks))).to(dtype)
    x = torch.randn(batch, d_model, dtype=dtype)
    return measure_saved_bytes(blocks, x, checkpoint)


_ACT_CASES = [
    (8, 16, 3, torch.float32, False),
    (8, 16, 3, torch.float32, True),
    (4, 32, 2, torch.bfloat16, False),
    (4, 32, 2, torch.bfloat16, True),
]
_ACT_CASES_HIDDEN = [
    (5, 24, 4, torch.float16, False),
    (5, 24, 4, torch.float16, True),
    (16, 8, 1, torch.float64, False),
    (3, 40, 6, torch.float32, True),
]


def _check_activations(activation_bytes, cases) -> None:
    calls = [((b, d, n), {"dtype": dt, "checkpoint": ck}) for b, d, n, dt, ck in cases]
    answers = Recorded("activation_bytes", calls, activation_bytes.probe(attempt_all, calls))
    for (b, d, n, dt, ck), (args, kwargs) in zip(cases, calls):
        got = call_student(answers, *args, **kwargs, name="activation_bytes")
        want = measured_activation_bytes(b, d, n, dt, ck)
        if type(got) is int and got == want:
            continue
        size = torch.empty((), dtype=dt).element_size()
        if isinstance(got, float) and got == want:
            cause = "return an int (a number of bytes), not a float"
        elif isinstance(got, (int, float)) and got == 8 * want:
            cause = (
                "count bytes, not bits: torch.finfo(dtype).bits is 8 times the element size "
                "(use torch.empty((), dtype=dtype).element_size() or dtype.itemsize)"
            )
        elif ck:
            cause = (
                "a checkpointed block keeps only its input (batch * d_model numbers); what it "
                "computes inside is recomputed during backward"
            )
        elif isinstance(got, (int, float)) and got * size == want * 4:
            cause = f"use the dtype's element size ({dt}: {size} bytes), not 4"
        else:
            cause = (
                "count what each op saves: the first Linear its input (d), GELU its input "
                "(4d), the second Linear its input, GELU's output (4d): 9 * d numbers per row "
                "and block"
            )
        fail(
            f"activation_bytes({b}, {d}, {n}, dtype={dt}, checkpoint={ck}) vs the bytes "
            "measured here with saved_tensors_hooks",
            yours=got,
            expected=want,
            cause=cause,
        )


def check_activation_bytes(activation_bytes) -> None:
    """Compare with the activation memory measured here (saved tensors of the forward pass)
    for 4 models, float32 and bfloat16, with and without checkpointing.

    Raises:
        CheckFailed: a prediction differs from the measurement, or is not an int.
    """
    activation_bytes = student(activation_bytes, "activation_bytes")
    _check_activations(activation_bytes, _ACT_CASES)
    passed("activation_bytes equals the measured activation memory, with and without checkpoints")


def check_activation_bytes_hidden(activation_bytes) -> None:
    """Other shapes and dtypes."""
    activation_bytes = student(activation_bytes, "activation_bytes")
    _check_activations(activation_bytes, _ACT_CASES_HIDDEN)
    passed("activation_bytes is right for float16, float64 and other shapes")


def _probe_activation_peak_cuda(activation_bytes, batch, d_model, n_blocks) -> dict:
    """Probe (CUDA): the student's prediction for a bfloat16 model on the GPU, and the memory
    that model's forward pass leaves allocated on the GPU, with and without checkpointing."""
    out = {}
    for ck in (False, True):
        with torch.no_grad():  # warm-up: cuBLAS allocates its workspace once, at the first matmul
            run_blocks(
                nn.Sequential(MLPBlock(d_model)).to("cuda", torch.bfloat16),
                torch.randn(batch, d_model, device="cuda", dtype=torch.bfloat16),
            )
        torch.manual_seed(0)
        blocks = nn.Sequential(*(MLPBlock(d_model) for _ in range(n_blocks))).to(
            "cuda", torch.bfloat16
        )
        x = torch.randn(batch, d_model, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        y = run_blocks(blocks, x, ck)
        torch.cuda.synchronize()
        # everything the forward allocated and kept: saved activations, block outputs
        out[ck] = torch.cuda.memory_allocated() - before
        del y, blocks, x
        torch.cuda.empty_cache()
    return {
        "measured": out,
        "predicted": {
            ck: activation_bytes(batch, d_model, n_blocks, dtype=torch.bfloat16, checkpoint=ck)
            for ck in (False, True)
        },
    }


def check_activation_bytes_cuda(activation_bytes) -> None:
    """On a GPU: the prediction agrees (within 5%) with the memory a bfloat16 model's forward
    pass leaves allocated (``torch.cuda.memory_allocated``), with and without checkpointing."""
    from grader.checks.common import cuda_or_not_checked

    if not cuda_or_not_checked("activation_bytes against torch.cuda.memory_allocated"):
        return
    activation_bytes = student(activation_bytes, "activation_bytes")
    seen = activation_bytes.probe(_probe_activation_peak_cuda, 512, 1024, 4)
    for ck in (False, True):
        got, want = seen["predicted"][ck], seen["measured"][ck]
        require(
            isinstance(got, int) and abs(got - want) <= 0.05 * want + 2**16,
            f"activation_bytes(512, 1024, 4, dtype=bfloat16, checkpoint={ck}) vs the GPU memory "
            "its forward pass keeps",
            yours=got,
            expected=f"{want} (within 5% + 64 KiB)",
            cause="count every activation saved for backward, in the model's dtype",
        )
    passed("activation_bytes agrees with the GPU memory measured after forward")


# --------------------------------------------------------------------------- zero_memory_bytes
def _zero_cases():
    """24 cases that divide exactly, and 6 whose shards are not whole numbers of bytes (the
    world size does not divide 12, 2 or 16 times the count): those tell the exact quotient
    from one rounded, floored (//) or rounded up."""
    exact = [
        (n, ws, stage)
        for n in (1_000_000, 7_500_000_000)
        for ws in (1, 8, 64)
        for stage in (0, 1, 2, 3)
    ]
    fractional = [
        (1_000_003, 7, 1),
        (1_000_003, 7, 3),
        (1_000_003, 12, 2),
        (5, 3, 2),
        (5, 3, 3),
        (5, 7, 1),
    ]
    return exact + fractional


#: Units a number of bytes may have been mistaken for, with their size in bytes.
_BYTE_UNITS = {"GB": 1e9, "GiB": 2**30, "MB": 1e6, "MiB": 2**20}


def _check_zero_memory(zero_memory_bytes, cases) -> None:
    ref = reference(ASSIGNMENT).zero_memory_bytes
    calls = [((n, ws, stage), {}) for n, ws, stage in cases]
    bad = [((10, 2, 4), {}), ((10, 2, -1), {}), ((10, 0, 0), {}), ((10, -2, 1), {})]
    records = zero_memory_bytes.probe(attempt_all, calls + bad)
    answers = Recorded("zero_memory_bytes", calls + bad, records)
    for (n, ws, stage), (args, _) in zip(cases, calls):
        got = call_student(answers, *args, name="zero_memory_bytes")
        want = ref(n, ws, stage)
        ok = isinstance(got, (int, float)) and abs(got - want) <= 1e-9 * want
        if ok:
            continue
        gib = f" ({want / 2**30:.1f} GiB)" if want > 2**30 else ""
        number = isinstance(got, (int, float)) and not isinstance(got, bool)
        unit = next(
            (
                u
                for u, size in _BYTE_UNITS.items()
                if number and abs(got * size - want) <= 1e-6 * want
            ),
            None,
        )
        if (
            number
            and float(got).is_integer()
            and not float(want).is_integer()
            and abs(got - want) < 16
        ):
            cause = (
                f"you rounded (yours is a whole number within 16 bytes of the exact value): "
                f"with {ws} ranks a shard of {n} parameters is not a whole number of bytes; "
                "return the exact quotient (/), without round, int(), // or math.ceil"
            )
        elif unit:
            cause = f"return bytes, not {unit} (you divided by {_BYTE_UNITS[unit]:.6g})"
        else:
            cause = (
                "2 bytes of bf16 parameters + 2 of gradients + 12 of fp32 Adam state (master "
                "weights, first and second moments) per parameter; stage 1 divides the 12 by the "
                "world size, stage 2 the gradients too, stage 3 the parameters too"
            )
        fail(
            f"zero_memory_bytes({n}, {ws}, stage={stage})",
            yours=got,
            expected=f"{want:.10g}{gib}",
            cause=cause,
        )
    for args, _ in bad:
        try:
            answers(*args)
        except ValueError:
            continue
        except Exception:  # noqa: BLE001 - any other outcome is the failure below
            pass
        fail(
            f"zero_memory_bytes{args}",
            yours="no ValueError",
            expected="ValueError (ZeRO has stages 0, 1, 2 and 3, and at least one rank)",
            cause="raise ValueError for a stage outside 0..3 and for a world size below 1 "
            "(stage 0 divides nothing, so it must be checked, not left to a ZeroDivisionError)",
        )


def check_zero_memory_bytes(zero_memory_bytes) -> None:
    """Compare with ZeRO's model-state arithmetic on 30 cases (Rajbhandari et al., 2020), 6 of
    them with shards that are not whole numbers of bytes (exact division, no rounding).

    Raises:
        CheckFailed: a value differs, or an unknown stage does not raise ValueError.
    """
    zero_memory_bytes = student(zero_memory_bytes, "zero_memory_bytes")
    _check_zero_memory(zero_memory_bytes, _zero_cases())
    passed("zero_memory_bytes follows ZeRO's arithmetic for stages 0 to 3")
