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

from .helpers import assert_sample_scores_as_declared, reference_fn, run_every_check, sample_params

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
        ("bucketed_ddp", "BucketedDDP"),
        ("sharded_optimizer", "ShardedOptimizer"),
        ("activation_bytes", "activation_bytes"),
        ("zero_memory_bytes", "zero_memory_bytes"),
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
