"""11_scaling: the checks accept the reference and written-differently answers and reject every
listed mistake (gloo processes on the CPU, timelines recorded at the dispatcher); an answer
whose ranks hang in a collective fails within seconds; the NCCL variants run on 2 GPUs."""

import inspect
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
