"""11_scaling: the checks accept the reference and written-differently answers and reject every
listed mistake (gloo processes on the CPU, timelines recorded at the dispatcher); an answer
whose ranks hang in a collective fails within seconds; the NCCL variants run on 2 GPUs."""

import inspect
import math
import sys
import time

import pytest
import torch
import torch.distributed as dist
from torch import nn

from grader.checks import ch11_scaling as checks
from grader.runtime import course
from grader.runtime.distributed import run_ranks

from .helpers import (
    assert_sample_scores_as_declared,
    exercise_params,
    reference_fn,
    run_every_check,
    sample_params,
)

A = "11_scaling"


@pytest.mark.parametrize(
    "name, signature",
    [
        ("BucketedDDP", "(module: torch.nn.modules.module.Module, bucket_bytes: int)"),
        (
            "ShardedOptimizer",
            "(params, optimizer_cls: type[torch.optim.optimizer.Optimizer], **kwargs)",
        ),
        (
            "activation_bytes",
            "(batch: int, d_model: int, n_blocks: int, *, dtype: torch.dtype = torch.float32, "
            "checkpoint: bool = False) -> int",
        ),
        ("zero_memory_bytes", "(num_params: int, world_size: int, stage: int) -> float"),
    ],
)
def test_reference_has_the_documented_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


def test_reference_methods_are_there():
    ddp, opt = reference_fn(A, "BucketedDDP"), reference_fn(A, "ShardedOptimizer")
    assert str(inspect.signature(ddp.finish_gradient_synchronization)) == "(self) -> None"
    assert {"step", "zero_grad"} <= set(vars(opt))


@pytest.mark.parametrize(
    "check, name",
    [
        pytest.param(check, name, id=f"{check}-{name}", marks=exercise_params(A, [check])[0].marks)
        for check, name in [
            ("bucketed_ddp", "BucketedDDP"),
            ("sharded_optimizer", "ShardedOptimizer"),
            ("activation_bytes", "activation_bytes"),
            ("zero_memory_bytes", "zero_memory_bytes"),
        ]
    ],
)
def test_reference_passes_every_check(check, name, capsys):
    run_every_check(checks, check, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


@pytest.mark.slow  # waits for a hanging rank to time out
def test_a_hanging_answer_fails_within_seconds_with_the_ranks_named():
    from grader.tools.samples import load_samples

    sample = next(s for s in load_samples(A) if s.name == "wrong_zero_owner_only_broadcast")
    namespace: dict = {}
    exec(sample.cells["sharded_optimizer"], namespace)  # noqa: S102 - the course's own sample
    start = time.monotonic()
    with pytest.raises(AssertionError, match=r"had not finished at the deadline(.|\n)*same order"):
        checks.check_sharded_optimizer(namespace["ShardedOptimizer"])
    assert time.monotonic() - start < checks.rank_deadline_s() + 15


def test_timeline_sees_collectives_however_they_are_called():
    def rank_fn(rank, world_size):
        from torch.distributed import all_reduce  # bound before the timeline exists

        timeline = checks.CommTimeline()
        with timeline:
            all_reduce(torch.ones(10))
            dist.all_reduce(torch.ones(3, dtype=torch.float64), async_op=True).wait()
            timeline.mark("between")
            dist.broadcast(torch.ones(2), src=0)
        return [
            (e["kind"], e.get("op"), e.get("bytes"), e.get("async_op")) for e in timeline.events
        ]

    events = run_ranks(rank_fn, 2, timeout_s=30)[0]
    assert events == [
        ("collective", "allreduce_", 40, False),
        ("collective", "allreduce_", 24, True),
        ("between", None, None, None),
        ("collective", "broadcast_", 8, False),
    ]


def test_greedy_buckets_by_hand():
    assert checks.greedy_buckets([16, 512, 128, 4096, 128, 1024], 2000) == [656, 4096, 1152]
    assert checks.greedy_buckets([10, 10, 10], 10**6) == [30]


def test_measured_activation_bytes_match_the_saved_tensors_by_hand():
    # 2 blocks, batch 3, d 4, float32: per block input (12) + GELU input (48) + its output (48)
    assert checks.measured_activation_bytes(3, 4, 2, torch.float32, False) == 2 * 108 * 4
    assert checks.measured_activation_bytes(3, 4, 2, torch.float32, True) == 2 * 12 * 4


def test_state_bytes_skip_parameters_and_count_shared_storage_once():
    model = nn.Linear(4, 4)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    params |= {p.grad.untyped_storage().data_ptr() for p in model.parameters()}
    holder = type("Holder", (), {})()
    holder.optimizer, holder.again = opt, [opt]
    assert checks._state_bytes(holder, params, set(), set()) == 2 * (16 + 4) * 4


def _reference_module(tmp_path):
    """The reference solution as an importable module (spawned NCCL ranks import it)."""
    source = "\n\n".join(
        course.strip_solution_markers(c.source)
        for c in course.solution_cells(course.read(course.source_path(A)))
    )
    (tmp_path / "scaling_reference.py").write_text(source)
    sys.path.insert(0, str(tmp_path))
    import scaling_reference

    return scaling_reference


@pytest.mark.multi_gpu
def test_reference_bucketed_ddp_and_sharded_optimizer_with_nccl(tmp_path):
    ref = _reference_module(tmp_path)
    checks._check_bucketed(
        checks.student(ref.BucketedDDP, "BucketedDDP"), checks.DDP_WIDTHS, 2000, 0, backend="nccl"
    )
    checks._check_sharded(
        checks.student(ref.ShardedOptimizer, "ShardedOptimizer"),
        "Adam",
        {"lr": 0.01},
        checks.ZERO_WIDTHS,
        0,
        backend="nccl",
    )


def test_timeline_stamps_when_a_collective_completes():
    def rank_fn(rank, world_size):
        from datetime import timedelta

        store = dist.distributed_c10d._get_default_store()
        timeline = checks.CommTimeline(completions=True)
        with timeline:
            if rank == 1:  # joins only once rank 0 has marked "started"
                store.wait(["started"], timedelta(seconds=20))
            work = dist.all_reduce(torch.ones(4), async_op=True)
            timeline.mark("started")
            if rank == 0:
                store.set("started", "1")
            work.wait()
            timeline.mark("waited")
        plain = checks.CommTimeline()  # completions are off unless asked for
        with plain:
            dist.all_reduce(torch.ones(1))
        time.sleep(0.1)
        return timeline.events, plain.events

    events, plain = run_ranks(rank_fn, 2, timeout_s=30)[0]
    reduce, started, waited = events
    assert reduce["kind"] == "collective" and "done_ns" in reduce
    assert started["t_ns"] < reduce["done_ns"]
    assert [e["kind"] for e in plain] == ["collective"] and "done_ns" not in plain[0]


def _overlap_timeline(done_after: str | None, step: int = 0) -> list[dict]:
    """Step events of a checked rank: gradients a, b, c, d at t = 10, 20, 30, 40 and one
    all-reduce started at 15 that completed at the time of the gradient named (+1)."""
    t = {"a": 10, "b": 20, "c": 30, "d": 40}
    events = [{"kind": "step", "step": step, "t_ns": 0}]
    for name in "abcd":
        events.append({"kind": "grad", "name": name, "bytes": 4, "t_ns": t[name]})
        if name == "a":
            reduce = {"kind": "collective", "op": "allreduce_", "bytes": 8, "t_ns": 15}
            if done_after:
                reduce["done_ns"] = t[done_after] + 1
            events.append(reduce)
    return events + [{"kind": "backward_end", "t_ns": 50}]


def _held(released: bool) -> list[dict]:
    return [
        {"kind": "step", "step": 0, "t_ns": 0},
        {"kind": "held", "checked": 0, "released": released, "waited_ns": 1, "t_ns": 5},
    ]


def test_overlap_check_reads_completions_against_gradients():
    checks._check_overlap([{"timeline": _overlap_timeline("d")}, {"timeline": _held(True)}], 3.0)
    checks._check_overlap([{"timeline": _overlap_timeline(None)}, {"timeline": _held(True)}], 3.0)
    with pytest.raises(
        AssertionError,
        match=r"8 bytes \(started when the gradient of a was ready\) "
        r"had completed before the gradient of c",
    ):
        checks._check_overlap([{"timeline": _overlap_timeline("b")}, {"timeline": _held(True)}], 3)
    with pytest.raises(AssertionError, match="had stopped waiting for it"):
        checks._check_overlap(
            [{"timeline": _overlap_timeline(None)}, {"timeline": _held(False)}], 3
        )


def test_state_bytes_leave_out_what_an_inner_optimizer_steps():
    """A flat fp32 shard that the inner optimizer updates is a parameter, not state."""
    model = nn.Linear(4, 4)
    shard = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in model.parameters()])[:10])
    holder = type("Holder", (), {})()
    holder.shard, holder.optimizer = shard, torch.optim.Adam([shard])
    shard.grad = torch.ones(10)
    holder.optimizer.step()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    params |= checks._stepped_storages(holder)
    assert checks._state_bytes(holder, params, set(), set()) == 2 * 10 * 4


def test_zero_memory_cases_separate_exact_from_rounded_division():
    ref = reference_fn(A, "zero_memory_bytes")
    fractional = [c for c in checks._zero_cases() if not float(ref(*c)).is_integer()]
    assert len(fractional) >= 4
    assert {round(ref(*c)) > ref(*c) for c in fractional} == {True, False}  # up and down


def test_unbalanced_model_splits_unequally_by_count():
    sizes = [
        p.numel() for p in checks.ddp_test_model(checks.ZERO_UNBALANCED_WIDTHS, 0).parameters()
    ]
    first_half = sum(sizes[: len(sizes) // 2])
    assert 2 * first_half * 4 > 2 * sum(sizes) * 4 / 2 + 2 * max(sizes) * 4  # over the limit


# ------------------------------------------------------------- what the notebook's text says
_LAYER_BYTES = 512 * 512 * 4 + 512 * 4  # one Linear(512, 512) in fp32: weight and bias


def _ddp_bucket_runs(rank, world_size):
    """Per DDP configuration, per step, (bytes, parameter names) of each bucket DDP hands to its
    communication hook, in order; and the hooks DDP left on the parameters as tensors."""
    from torch.nn.parallel import DistributedDataParallel

    out = {}
    for label, kwargs in (
        ("default", {}),
        ("cap2", {"bucket_cap_mb": 2}),
        ("unused", {"find_unused_parameters": True}),
        ("static", {"static_graph": True}),
    ):
        torch.manual_seed(0)
        model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(512, 512), nn.Tanh())])
        names = {id(p): n for n, p in model.named_parameters()}
        net = DistributedDataParallel(model, **kwargs)
        steps: list[list] = []

        def comm_hook(state, bucket, steps=steps, names=names):
            buffer = bucket.buffer()
            names_ = [names[id(p)] for p in bucket.parameters()]
            steps[-1].append((buffer.numel() * buffer.element_size(), names_))
            work = dist.all_reduce(buffer.div_(world_size), async_op=True)
            return work.get_future().then(lambda fut: buffer)

        net.register_comm_hook(None, comm_hook)
        for _ in range(3):
            steps.append([])
            net(torch.randn(4, 512)).square().mean().backward()
        out[label] = {
            "steps": steps,
            "cap": net._get_ddp_logging_data()["bucket_cap_bytes"],
            "tensor_hooks": [
                (p._post_accumulate_grad_hooks, p._backward_hooks) for p in model.parameters()
            ],
        }
    return out


def test_ddp_buckets_and_hooks_are_as_section_1_says():
    """torch 2.11 and 2.14 alike: one bucket for every parameter in the first step; from the
    second, buckets rebuilt in the order the gradients arrived, each closed once it reaches its
    cap (so it may pass it by one gradient): the first at dist._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB
    with the default caps, at bucket_cap_mb when one is given, the others at 25 MiB; with
    find_unused_parameters the buckets formed at construction in parameter order (the 1 MiB one
    reduced last) stay; with static_graph the rebuild comes a step later. DDP hooks the
    AccumulateGrad nodes in C++: no Python hook on the parameter tensors."""
    assert dist._DEFAULT_FIRST_BUCKET_BYTES == 1024 * 1024
    runs = run_ranks(_ddp_bucket_runs, 2, timeout_s=120)[0]
    total = 4 * _LAYER_BYTES
    arrival = ["6.bias", "6.weight", "4.bias", "4.weight", "2.bias", "2.weight"]
    arrival += ["0.bias", "0.weight"]

    def sizes(label, step):
        return [n for n, _ in runs[label]["steps"][step]]

    assert runs["default"]["cap"] == 25 * 2**20
    for label in ("default", "cap2", "static"):
        assert sizes(label, 0) == [total], label  # the first step: one bucket
    default = runs["default"]["steps"]
    assert sizes("default", 1) == sizes("default", 2) == [_LAYER_BYTES, 3 * _LAYER_BYTES]
    assert default[1][0][1] == arrival[:2]  # the last layer, whose gradients come first
    assert [n for _, names in default[1] for n in names] == arrival
    assert 2**20 < _LAYER_BYTES < 2**20 + 512 * 512 * 4  # passed the cap by its last gradient
    # bucket_cap_mb given: the first bucket's cap is bucket_cap_mb (2 MiB), not 1 MiB
    assert runs["cap2"]["cap"] == 2 * 2**20
    assert sizes("cap2", 1) == [2 * _LAYER_BYTES, 2 * _LAYER_BYTES]
    # find_unused_parameters: construction-time buckets in parameter order, never rebuilt
    unused = runs["unused"]["steps"]
    assert all(sizes("unused", s) == [total - 512 * 512 * 4, 512 * 512 * 4] for s in range(3))
    assert unused[0][-1][1] == ["0.weight"]  # the 1 MiB bucket holds the first parameter
    # static_graph: still one bucket in the second step, rebuilt for the third
    assert sizes("static", 1) == [total]
    assert sizes("static", 2) == [_LAYER_BYTES, 3 * _LAYER_BYTES]
    for label, run in runs.items():
        assert run["tensor_hooks"] == [(None, None)] * 8, label


def _recipe_runs(rank, world_size):
    """Recipe A (bf16 parameters) and B (fp32 parameters, bf16 autocast): dtype and bytes DDP
    all-reduces in a step, the parameter count, the gradient's and Adam's state dtypes."""
    from torch.nn.parallel import DistributedDataParallel

    out = {}
    for recipe in ("A", "B"):
        torch.manual_seed(0)
        model = nn.Sequential(checks.MLPBlock(16), checks.MLPBlock(16))
        if recipe == "A":
            model = model.to(torch.bfloat16)
        net = DistributedDataParallel(model)
        reduced = []

        def comm_hook(state, bucket, reduced=reduced):
            buffer = bucket.buffer()
            reduced.append((buffer.dtype, buffer.numel() * buffer.element_size()))
            work = dist.all_reduce(buffer.div_(world_size), async_op=True)
            return work.get_future().then(lambda fut: buffer)

        net.register_comm_hook(None, comm_hook)
        x = torch.randn(4, 16).to(next(model.parameters()).dtype)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=recipe == "B"):
            loss = net(x).float().square().mean()
        loss.backward()
        optimizer = torch.optim.Adam(model.parameters())
        optimizer.step()
        p = next(model.parameters())
        out[recipe] = {
            "reduced": reduced,
            "params": sum(q.numel() for q in model.parameters()),
            "grad": p.grad.dtype,
            "state": {k: v.dtype for k, v in optimizer.state[p].items() if k != "step"},
        }
    return out


def test_mixed_precision_recipes_are_as_section_2_says():
    """Recipe A: DDP all-reduces bf16 gradients, 2 bytes per parameter, and torch.optim.Adam keeps
    bf16 moments (no fp32 master of its own); recipe B (fp32 parameters under autocast): fp32
    gradients, 4 bytes per parameter, fp32 moments."""
    runs = run_ranks(_recipe_runs, 2, timeout_s=120)[0]
    for recipe, dtype, size in (("A", torch.bfloat16, 2), ("B", torch.float32, 4)):
        run = runs[recipe]
        assert run["reduced"] == [(dtype, size * run["params"])], recipe
        assert run["grad"] == dtype
        assert run["state"] == {"exp_avg": dtype, "exp_avg_sq": dtype}


def _zero1_bytes(rank, world_size, sharded_optimizer_cls):
    """Bytes into each kind of collective in one step of DDP followed by ShardedOptimizer."""
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 8))
    net = DistributedDataParallel(model)
    optimizer = sharded_optimizer_cls(list(model.parameters()), torch.optim.Adam, lr=1e-3)
    timeline = checks.CommTimeline()
    with timeline:
        net(torch.randn(4, 32)).square().mean().backward()
        optimizer.step()
    kinds: dict[str, int] = {}
    for e in timeline.events:
        if e["kind"] == "collective":
            kinds[e["op"]] = kinds.get(e["op"], 0) + e["bytes"]
    return kinds, sum(p.numel() * p.element_size() for p in model.parameters())


def test_zero1_with_broadcasts_sends_one_and_a_half_times_ddp(tmp_path):
    """Section 2's table: DDP's all-reduce takes in every gradient byte and exercise 3's
    broadcasts every parameter byte; in the ring model (each rank sends 2(N-1)/N of an
    all-reduce's bytes, (N-1)/N of a broadcast's, reduce-scatter's or all-gather's) ZeRO-1 so
    written sends 1.5x DDP's bytes, and with a reduce-scatter and an all-gather the same."""
    ref = _reference_module(tmp_path)
    kinds, param_bytes = run_ranks(_zero1_bytes, 2, ref.ShardedOptimizer, timeout_s=120)[0]
    # equal bytes in: 2(N-1)/N + (N-1)/N = 1.5 x 2(N-1)/N per rank
    assert kinds == {"allreduce_": param_bytes, "broadcast_": param_bytes}


def _raw_events(name: str) -> list[dict]:
    """A shipped real trace's complete events, read with json alone (not the course's reader)."""
    import gzip
    import json

    with gzip.open(course.TRACES / f"{name}.json.gz", "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def test_real_ddp_trace_demo_measures_what_the_raw_events_hold(capsys):
    """11's A100 DDP cell: NCCL's kernels beside backward's, and how little of them hid behind
    compute, each fact read again from the raw events."""
    import statistics

    import matplotlib
    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    cells = {c.get("id"): c.source for c in course.read(course.source_path(A)).cells}
    ns: dict = {"plt": plt}
    exec(compile(cells["code-05r"], "code-05r", "exec"), ns)
    plt.close("all")
    out = capsys.readouterr().out

    raw = _raw_events("a100_ddp_nccl_2ranks")
    kernels = sorted((e for e in raw if e["cat"] == "kernel"), key=lambda e: e["ts"])
    nccl = [k for k in kernels if k["name"].startswith("ncclKernel_")]
    compute = [k for k in kernels if not k["name"].startswith("ncclKernel_")]
    assert {k["args"]["stream"] for k in nccl} == {40}
    assert {k["args"]["stream"] for k in compute} == {7}
    assert sum("AllReduce" in k["name"] for k in nccl) == 15
    assert sum("Broadcast" in k["name"] for k in nccl) == 6
    assert any("fprop_implicit_gemm" in k["name"] for k in compute)  # cuDNN convolutions ...
    assert any("bn_fw" in k["name"] for k in compute)  # ... and BatchNorm

    # backward's kernels: launched from the thread on which DDP's all-reduces start
    notes = [e for e in raw if e["cat"] == "user_annotation"]
    main = {e["tid"] for e in notes if e["name"] == "## backward ##"}
    hooks = {e["tid"] for e in notes if e["name"] == "nccl:all_reduce"}
    assert len(main) == len(hooks) == 1 and main != hooks
    launch = {  # cudaLaunchKernel, and cuLaunchKernel / cudaLaunchKernelExC for some libraries
        e["args"]["correlation"]: e
        for e in raw
        if e["cat"] in ("cuda_runtime", "cuda_driver") and "LaunchKernel" in e["name"]
    }
    backward = [k for k in compute if launch[k["args"]["correlation"]]["tid"] in hooks]
    assert len(ns["backward"]) == len(backward) == 3 * 587
    broadcasts = [e for e in notes if e["name"] == "nccl:broadcast"]
    forwards = [e for e in notes if e["name"] == "DistributedDataParallel.forward"]
    assert len(broadcasts) == 2 * len(forwards) == 6
    assert all(any(f["ts"] <= b["ts"] <= f["ts"] + f["dur"] for f in forwards) for b in broadcasts)

    def union(intervals):
        total, end = 0.0, float("-inf")
        for a, b in sorted(intervals):
            total, end = total + max(0.0, b - max(a, end)), max(end, b)
        return total

    def hidden(k):  # µs of the NCCL kernel during which a compute kernel runs
        a, b = k["ts"], k["ts"] + k["dur"]
        return union([(max(a, c["ts"]), min(b, c["ts"] + c["dur"])) for c in compute
                      if c["ts"] < b and c["ts"] + c["dur"] > a])  # fmt: skip

    fraction = sum(hidden(k) for k in nccl) / sum(k["dur"] for k in nccl)
    assert ns["ddp"].communication_overlap_fraction() == pytest.approx(fraction)
    assert fraction < 0.25  # "only a small part of their time overlapped a compute kernel"
    assert f"{fraction:.1%} of the NCCL kernels' time" in out

    step = max((e for e in notes if e["name"].startswith("ProfilerStep")), key=lambda e: e["ts"])
    bwd = [k for k in backward if step["ts"] <= k["ts"] <= step["ts"] + step["dur"]]
    start, stop = bwd[0]["ts"], max(k["ts"] + k["dur"] for k in bwd)
    busy = union([(k["ts"], k["ts"] + k["dur"]) for k in bwd]) / (stop - start)
    assert 0.2 < busy < 0.4  # "idle for most of backward's span"
    assert f"busy for {busy:.0%} of it" in out
    delay = statistics.median(k["ts"] - launch[k["args"]["correlation"]]["ts"] for k in bwd)
    assert delay < 50  # µs: "each starts soon after its launch call"
    reduces = [k for k in nccl if "AllReduce" in k["name"] and step["ts"] <= k["ts"]]
    assert reduces[0]["ts"] < start + 0.05 * (stop - start)  # starts early in backward
    assert reduces[-1]["ts"] >= stop and hidden(reduces[-1]) == 0  # nothing left to hide behind
    assert "after backward's last kernel: 0% of it overlapped" in out


def _hta_figures(raw: list[dict], include_last_step: bool, round_to_us: bool) -> dict:
    """Rank 0's figures by HolisticTraceAnalysis 0.5.0's rules, read from its source and applied
    here to the raw events with plain interval code (neither HTA nor the course's reader): the
    GPU's activities are its kernels, copies and memsets whose launch call began before the last
    ProfilerStep (or, with the last step, before it ended); times rounded inward to whole µs
    unless HTA_DISABLE_NS_ROUNDING=1; compute = the kernels that are not NCCL's."""

    def times(e):
        start, end = e["ts"], e["ts"] + e["dur"]
        return (math.ceil(start), math.floor(end)) if round_to_us else (start, end)

    def union(spans):
        total, end = 0.0, float("-inf")
        for a, b in sorted(spans):
            total, end = total + max(0.0, b - max(a, end)), max(end, b)
        return total

    steps = sorted(times(e) for e in raw if e["name"].startswith("ProfilerStep#"))
    launched = {  # correlation id -> when the launch call (kernel, copy or memset) began
        e["args"]["correlation"]: times(e)[0]
        for e in raw
        if e["cat"] in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]
    }
    last_start, last_end = steps[-1]
    gpu = [
        e
        for e in raw
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset")
        and (launched[e["args"]["correlation"]] <= last_end if include_last_step
             else launched[e["args"]["correlation"]] < last_start)
    ]  # fmt: skip
    comm = [times(e) for e in gpu if e["name"].startswith("ncclKernel_")]
    compute = [times(e) for e in gpu if e["cat"] == "kernel" and not e["name"].startswith("nccl")]
    everything = [times(e) for e in gpu]
    span = max(b for _, b in everything) - min(a for a, _ in everything)
    together = union(comm) + union(compute) - union(comm + compute)
    causes = {"host_wait": 0.0, "kernel_wait": 0.0, "other": 0.0}
    on_7 = sorted((e for e in gpu if e["args"]["stream"] == 7), key=lambda e: e["ts"])
    for before, e in zip(on_7, on_7[1:]):
        gap, ended = times(e)[0] - times(before)[1], times(before)[1]
        if launched[e["args"]["correlation"]] > ended:  # launched after the queue ran dry
            causes["host_wait"] += gap
        else:
            causes["kernel_wait" if gap < 30 else "other"] += gap
    return {
        "steps": len(steps) - (not include_last_step),
        "kernel_time(us)": span,
        "idle_time(us)": span - union(everything),
        "compute_time(us)": union(compute),
        "overlap": together / union(comm),
        "stream 7": causes,
    }


# HTA 0.5.0 passes inplace= to pandas methods, which pandas 3.1 deprecates (requirements.txt
# keeps pandas below 4, which removes it)
@pytest.mark.filterwarnings("ignore::DeprecationWarning:hta")
def test_hta_cell_gives_what_the_raw_events_hold(capsys):
    """11's HTA cell: HolisticTraceAnalysis's temporal breakdown, communication-computation
    overlap and stream 7's idle time agree with the same rules applied to the raw events; with
    the last step and the recorded nanoseconds they equal the course reader's figures."""
    try:
        import hta.trace_analysis  # noqa: F401
    except ImportError as e:
        pytest.fail(
            f"HolisticTraceAnalysis does not import ({e}); it is in requirements.txt: "
            f".venv/bin/pip install -r requirements.txt"
        )
    import os

    import matplotlib
    import matplotlib.pyplot as plt

    matplotlib.use("Agg")
    cells = {c.get("id"): c.source for c in course.read(course.source_path(A)).cells}
    ns: dict = {"plt": plt, "os": os, "time": time}
    for cell in ("code-05r", "code-05t"):
        exec(compile(cells[cell], cell, "exec"), ns)
    plt.close("all")
    out = capsys.readouterr().out

    raw = _raw_events("a100_ddp_nccl_2ranks")
    copies = {e["name"][:6] for e in raw if e["cat"] in ("gpu_memcpy", "gpu_memset")}
    assert copies == {"Memcpy", "Memset"}  # HTA tells "memory" kernels by these names
    runs = ns["hta_runs"]
    assert list(ns["hta_options"].values()) == [(False, True), (True, True), (True, False)]
    figures = {}
    for (label, (last_step, round_to_us)), hta_run in zip(ns["hta_options"].items(), runs.values()):
        mine = figures[label] = _hta_figures(raw, last_step, round_to_us)
        tb = hta_run.get_temporal_breakdown(visualize=False).iloc[0]
        ov = hta_run.get_comm_comp_overlap(visualize=False).iloc[0]
        gaps, _ = hta_run.get_idle_time_breakdown(streams=[7], visualize=False)
        exact = round_to_us  # whole µs add up exactly; ns times differ in the last float bits
        for column in ("kernel_time(us)", "idle_time(us)", "compute_time(us)"):
            assert tb[column] == pytest.approx(mine[column], rel=0 if exact else 1e-6), column
        assert ov["comp_comm_overlap_pctg"] == pytest.approx(100 * mine["overlap"], abs=0.005)
        assert dict(zip(gaps.idle_category, gaps.idle_time)) == pytest.approx(
            mine["stream 7"], rel=1e-6, abs=0.01
        )
        assert len(hta_run.t.get_iterations()) == mine["steps"] == (3 if last_step else 2)
        idle, busy = (
            100 * mine[k] / mine["kernel_time(us)"] for k in ("idle_time(us)", "compute_time(us)")
        )
        line = next(line for line in out.splitlines() if line.startswith(label))
        assert line.startswith(f"{label:<35} {mine['steps']:>5}"), line
        assert f"{idle:>6.2f} {busy:>8.2f}" in line and line.endswith(
            f"{100 * mine['overlap']:>17.2f}"
        )

    defaults, _, recorded = figures.values()
    # the last run's overlap is the course's communication_overlap_fraction(), to the digit
    assert ns["ddp"].communication_overlap_fraction() == pytest.approx(recorded["overlap"])
    course_line = next(line for line in out.splitlines() if line.startswith("course reader"))
    hta_line = next(line for line in out.splitlines() if line.startswith("... and HTA_DISABLE"))
    assert course_line.split()[-4:] == hta_line.split()[-4:]  # "HTA's figures are the course's"
    quoted = [f"{100 * run['overlap']:.2f} %" for run in (defaults, recorded)]
    assert quoted == ["14.31 %", "15.61 %"] and all(q in cells["md-05u"] for q in quoted)

    def shares(run):  # idle, compute, non-compute, overlap
        idle, busy = (
            run[k] / run["kernel_time(us)"] for k in ("idle_time(us)", "compute_time(us)")
        )
        return idle, busy, 1 - idle - busy, run["overlap"]

    moved = [abs(a - b) for a, b in zip(shares(defaults), shares(recorded))]
    assert max(moved) < 0.02, moved  # "each figure by under two percentage points"
    assert 0.7 < recorded["idle_time(us)"] / recorded["kernel_time(us)"] < 0.8  # "three quarters"
    assert recorded["overlap"] < 0.5  # "most runs with no computation beside it"
    host_wait = recorded["stream 7"]["host_wait"] / sum(recorded["stream 7"].values())
    assert host_wait > 0.95  # "nearly all the time between kernels is host wait"
    assert f"stream 7: host_wait {recorded['stream 7']['host_wait'] / 1e3:.1f} ms" in out
