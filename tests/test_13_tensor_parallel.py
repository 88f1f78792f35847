"""13_parallelism, sections 1 and 2: the checks of ``ColumnRowMLP`` and ``SequenceParallelMLP``
accept the reference and answers written differently, reject every listed mistake (gloo ranks on
the CPU, each rank's collectives recorded at the dispatcher) and name its likely cause; the
timeline sees functional collectives and DTensor's; the activation-memory demo's measurement
agrees with Korthikanti et al.'s count."""

import inspect

import pytest
import torch
import torch.distributed as dist

from grader.checks.ch13_parallelism import tensor as checks
from grader.checks.common import CheckFailed
from grader.runtime.collectives import CommTimeline, collective_kind
from grader.runtime.distributed import run_ranks

from .helpers import assert_sample_scores_as_declared, reference_fn, sample_params

A = "13_parallelism"
MINE = ("wrong_tp_", "correct_tp_", "wrong_sp_", "correct_sp_")


def answer_class(sample_name: str, grade_id: str, name: str):
    """The class ``name`` that a sample's cell ``grade_id`` defines."""
    import linecache

    from grader.tools import samples

    (sample,) = [s for s in samples.load_samples(A) if s.name == sample_name]
    code, filename = sample.cells[grade_id], f"<sample {sample_name}:{grade_id}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    namespace: dict = {"__name__": "__main__"}
    exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - the course's own sample
    return namespace[name]


@pytest.mark.parametrize(
    "name, signature",
    [
        (
            "ColumnRowMLP",
            "(fc1: torch.nn.modules.linear.Linear, fc2: torch.nn.modules.linear.Linear)",
        ),
        (
            "SequenceParallelMLP",
            "(norm: torch.nn.modules.normalization.LayerNorm, fc1: torch.nn.modules.linear.Linear, "
            "fc2: torch.nn.modules.linear.Linear)",
        ),
    ],
)
def test_reference_has_the_documented_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.slow  # starts ranks: 6 runs of 2 to 4 processes
@pytest.mark.parametrize("name", ["column_row_mlp", "sequence_parallel_mlp"])
def test_reference_passes_every_check(name, capsys):
    cls = reference_fn(A, {"column_row_mlp": "ColumnRowMLP"}.get(name, "SequenceParallelMLP"))
    getattr(checks, f"check_{name}")(cls)
    getattr(checks, f"check_{name}_hidden")(cls)
    assert capsys.readouterr().out.count("OK:") == 2


@pytest.mark.parametrize("sample", [p for p in sample_params(A) if p.id.startswith(MINE)])
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


@pytest.mark.slow
@pytest.mark.parametrize(
    "answer, cause",
    [
        ("wrong_tp_no_backward_all_reduce", "must all-reduce the gradient in backward"),
        ("wrong_tp_forward_all_reduce_detached", "no gradient reached"),
        ("wrong_tp_divides_by_world_size", "divided by the world size"),
        ("wrong_tp_bias_on_every_rank", "add it once, after the all-reduce"),
        ("wrong_tp_full_weights", "every rank keeps the full weights"),
        ("wrong_tp_gathers_hidden", "every rank keeps the full weights"),
        ("wrong_tp_hidden_full_weights", "does not compute with its parameters"),
        ("wrong_tp_shared_memory_exchange", "collective of zeros"),
        ("wrong_tp_shards_are_views", "keeps the whole weight's storage"),
    ],
)
def test_column_row_failures_name_the_cause(answer, cause):
    with pytest.raises(CheckFailed, match=cause):
        checks.check_column_row_mlp(answer_class(answer, "column_row_mlp", "ColumnRowMLP"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "answer, cause",
    [
        ("wrong_sp_all_reduce_then_slice", "an all-reduce where the reduce-scatter belongs"),
        ("wrong_sp_norm_after_gather", "the norm runs on the whole sequence"),
        ("wrong_sp_returns_full_sequence", "you return the whole sequence"),
        ("wrong_sp_no_residual", "the residual is missing"),
        ("wrong_sp_wrong_chunk", "gets the MLP's output for rank 1's positions"),
        ("wrong_sp_norm_after_gather_own_hooks", "the norm runs after the all-gather"),
        ("wrong_sp_hidden_full_weights", "does not compute with its parameters"),
        ("wrong_sp_layer_norm_default_eps", "not the given norm's eps"),
    ],
)
def test_sequence_parallel_failures_name_the_cause(answer, cause):
    cls = answer_class(answer, "sequence_parallel_mlp", "SequenceParallelMLP")
    with pytest.raises(CheckFailed, match=cause):
        checks.check_sequence_parallel_mlp(cls)
        checks.check_sequence_parallel_mlp_hidden(cls)


def _kinds(rank, world_size):
    import torch.distributed._functional_collectives as funcol

    timeline = CommTimeline()
    with timeline:
        funcol.wait_tensor(funcol.all_reduce(torch.ones(4), "sum", dist.group.WORLD))
        out = torch.empty(2 * world_size)
        dist.all_gather(list(out.chunk(world_size)), torch.ones(2))
        dist.reduce_scatter(torch.empty(2), list(torch.ones(2 * world_size).chunk(world_size)))
        ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        ag(torch.empty(3 * world_size), torch.ones(3))
    return [(e["collective"], e["bytes"], e["full_bytes"]) for e in timeline.events]


def test_timeline_records_functional_collectives_and_the_full_bytes_of_gathers():
    events = run_ranks(_kinds, 2, timeout_s=30)[0]
    assert events == [
        ("all_reduce", 16, 16),
        ("all_gather", 16, 16),  # the gathered output, whichever form
        ("reduce_scatter", 8, 16),  # the full input: the output is 1/world of it
        ("all_gather", 24, 24),
    ]


def _sent_by_form(rank, world_size):
    import torch.distributed._functional_collectives as funcol

    timeline = checks._SentTimeline()
    mine = torch.arange(3.0) + 10 * rank
    whole = torch.arange(2.0 * world_size) + 100 * rank
    with timeline:
        dist.all_reduce(mine.clone())
        funcol.wait_tensor(funcol.all_reduce(mine, "sum", dist.group.WORLD))
        dist.all_gather([torch.empty(3) for _ in range(world_size)], mine)
        ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        ag(torch.empty(3 * world_size), mine)
        funcol.wait_tensor(funcol.all_gather_tensor(mine, 0, dist.group.WORLD))
        dist.reduce_scatter(torch.empty(2), list(whole.chunk(world_size)))
        rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        rs(torch.empty(2), whole)
        funcol.wait_tensor(funcol.reduce_scatter_tensor(whole, "sum", 0, dist.group.WORLD))
    return [(e["collective"], e["sent"].tolist()) for e in timeline.events]


def test_sent_timeline_keeps_what_each_collective_form_sends():
    """All-reduce: the tensor; all-gather: this rank's piece; reduce-scatter: the whole input (a
    list form's pieces in order), whichever function started it."""
    events = run_ranks(_sent_by_form, 2, timeout_s=30)[1]
    mine, whole = [10.0, 11.0, 12.0], [100.0, 101.0, 102.0, 103.0]
    assert (
        events
        == [("all_reduce", mine)] * 2 + [("all_gather", mine)] * 3 + [("reduce_scatter", whole)] * 3
    )


def test_collective_kinds_of_operator_names():
    assert collective_kind("allreduce_") == "all_reduce"
    assert collective_kind("_allgather_base_") == "all_gather"
    assert collective_kind("_reduce_scatter_base_") == "reduce_scatter"
    assert collective_kind("_c10d_functional::reduce_scatter_tensor") == "reduce_scatter"
    assert collective_kind("broadcast_") == "broadcast"


def test_saved_bytes_counts_activations_once_and_skips_parameters():
    lin = torch.nn.Linear(4, 8)
    x = torch.randn(3, 4, requires_grad=True)
    context, counter = checks.saved_bytes(list(lin.parameters()))
    with context:
        torch.nn.functional.gelu(lin(x)).sum()
    # Linear saves x (12 floats), GELU its input (24 floats); the weight is not counted
    assert counter["bytes"] == (12 + 24) * 4


def test_sp_saved_bytes_budget_by_hand():
    # s=8, b=2, d=16, d_ff=32, 2 ranks, float32: fc1's gathered input 4*256 = 1024 bytes, GELU's
    # input and output 4*2*(8*2*16) = 2048; the norm's input 1024 / 2 with SP, 1024 without
    assert checks.sp_saved_bytes(8, 2, 16, 32, 2, 4) == {"sp": 3584, "tp_only": 4096}
