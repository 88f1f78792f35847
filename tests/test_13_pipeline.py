"""13_parallelism, part 3 (pipeline parallelism): the checks of ``bubble_fraction`` and
``measured_bubble`` accept the reference and written-differently answers, reject every listed
mistake and name it; the ideal schedules the check builds have the formula's bubble; the recorder
(grader.runtime.pipeline_timeline) sees what GPipe and 1F1B hold in flight on gloo ranks; and
the APIs sections 4 and 7 use behave as the notebook says (2-D mesh, DCP resharding)."""

import inspect
import json
import os

import pytest
import torch
from torch import nn

from grader.checks.ch13_parallelism import pipeline as checks
from grader.checks.common import CheckFailed
from grader.runtime.distributed import run_ranks
from grader.runtime.pipeline_timeline import TimedStage, pipeline_rank

from .helpers import answer_fn, assert_sample_scores_as_declared, reference_fn, sample_params

A = "13_parallelism"
MINE = ("wrong_bubble_", "correct_bubble_", "wrong_measured_", "correct_measured_")


@pytest.mark.parametrize(
    "name, signature",
    [
        (
            "bubble_fraction",
            "(p: int, m: int, schedule: str = '1f1b', virtual_stages: int = 1) -> float",
        ),
        ("measured_bubble", "(timelines: dict[int, list[tuple[float, float]]]) -> float"),
    ],
)
def test_reference_has_the_documented_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize("name", ["bubble_fraction", "measured_bubble"])
def test_reference_passes_every_check(name, capsys):
    fn = reference_fn(A, name)
    getattr(checks, f"check_{name}")(fn)
    getattr(checks, f"check_{name}_hidden")(fn)
    assert capsys.readouterr().out.count("OK:") == 2


@pytest.mark.parametrize(
    "sample", [p for p in sample_params(A) if p.values[0].name.startswith(MINE)]
)
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


#: Each mistake of this part, the exercise it answers and words its failure message must contain.
CAUSES = [
    ("wrong_bubble_ratio_to_ideal", "bubble_fraction", "Megatron's ratio"),
    ("wrong_bubble_p_over_m_plus_p", "bubble_fraction", "p/(m+p)"),
    ("wrong_bubble_1f1b_smaller", "bubble_fraction", "1F1B has the same bubble as GPipe"),
    ("wrong_bubble_1f1b_refuses_few_micro_batches", "bubble_fraction", "1F1B with m < p"),
    ("wrong_bubble_1f1b_clamps_m", "bubble_fraction", "do not count m as if it were p"),
    ("wrong_bubble_interleaved_divides_both", "bubble_fraction", "dividing both terms by v"),
    ("wrong_bubble_off_by_one", "bubble_fraction", "off-by-one"),
    ("wrong_bubble_accepts_virtual_stages_anywhere", "bubble_fraction", "virtual_stages != 1"),
    ("wrong_bubble_rule_only_when_interleaved_v", "bubble_fraction", "negative too"),
    ("wrong_bubble_schedule_any_case", "bubble_fraction", "names are exact"),
    ("wrong_measured_per_rank_span", "measured_bubble", "each rank's own span"),
    ("wrong_measured_mean_of_ranks", "measured_bubble", "averaged per-rank fractions"),
    ("wrong_measured_sums_durations", "measured_bubble", "counted twice"),
    ("wrong_measured_span_rank0_durations", "measured_bubble", "sum of rank 0's durations"),
    ("wrong_measured_rank0_only", "measured_bubble", "rank 0 alone"),
    ("wrong_measured_union_keeps_last_end", "measured_bubble", "furthest end so far"),
    ("wrong_measured_no_value_error", "measured_bubble", "raise ValueError"),
    ("wrong_measured_span_from_zero", "measured_bubble", "as if the run started at time 0"),
    ("wrong_measured_union_from_time_zero", "measured_bubble", "starts from time 0"),
    ("wrong_measured_assumes_ranks_0_to_n", "measured_bubble", "not range(len(timelines))"),
]


@pytest.mark.parametrize("sample, name, cause", CAUSES)
def test_each_mistake_is_named_in_the_failure(sample, name, cause):
    fn = answer_fn(A, sample, name)
    with pytest.raises(CheckFailed) as failure:
        getattr(checks, f"check_{name}")(fn)
        getattr(checks, f"check_{name}_hidden")(fn)
    assert cause in str(failure.value), str(failure.value)


def test_every_mistake_of_this_part_has_its_cause_checked():
    """A new wrong_bubble_/wrong_measured_ sample needs its cause in CAUSES; each exercise has at
    least two answers written differently."""
    from grader.tools.samples import load_samples

    names = {s.name for s in load_samples(A)}
    wrong = {n for n in names if n.startswith(("wrong_bubble_", "wrong_measured_"))}
    assert wrong == {sample for sample, _, _ in CAUSES}
    assert len({n for n in names if n.startswith("correct_bubble_")}) >= 2
    assert len({n for n in names if n.startswith("correct_measured_")}) >= 2


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m", [(1, 1), (2, 1), (2, 8), (4, 4), (4, 8), (3, 5), (8, 32)])
def test_ideal_schedules_have_the_formula_bubble(schedule, p, m):
    """The derivation's claim, simulated: with equal t_f and t_b on every stage, GPipe and 1F1B
    both last (m+p-1)(t_f+t_b), each stage busy m(t_f+t_b), whatever t_b/t_f; 1F1B with m < p
    too (every micro-batch in the warm-up: GPipe's run, what the statement says it returns)."""
    measured = reference_fn(A, "measured_bubble")
    formula = reference_fn(A, "bubble_fraction")(p, m, schedule)
    for t_f, t_b in [(1.0, 2.0), (0.003, 0.005), (1.0, 1.0)]:
        tl = checks.schedule_timeline(p, m, t_f, t_b, schedule)
        span = max(e for iv in tl.values() for _, e in iv) - min(
            s for iv in tl.values() for s, _ in iv
        )
        assert span == pytest.approx((m + p - 1) * (t_f + t_b))
        assert all(len(iv) == 2 * m for iv in tl.values())
        assert measured(tl) == pytest.approx(formula, abs=1e-12)


def test_ideal_1f1b_holds_p_minus_s_in_flight_and_gpipe_m():
    """The in-flight counts section 3 states, on the ideal schedules."""
    p, m = 4, 8
    for schedule, want in (("gpipe", [m] * p), ("1f1b", [p - s for s in range(p)])):
        tl = checks.schedule_timeline(p, m, 1.0, 2.0, schedule)
        peaks = []
        for s in range(p):
            # intervals in stage order: forwards have length 1, backwards 2
            in_flight = peak = 0
            for start, end in tl[s]:
                in_flight += 1 if end - start == 1.0 else -1
                peak = max(peak, in_flight)
            peaks.append(peak)
        assert peaks == want, schedule


def test_mistake_tables_differ_from_the_reference_on_the_visible_cases():
    """Every listed mistake of measured_bubble gives another value on some visible case, so the
    visible test can tell it apart (its cause can be named)."""
    ref = reference_fn(A, "measured_bubble")
    cases = checks._measured_cases()
    for mistake, _ in checks._MEASURED_MISTAKES:
        assert any(abs(mistake(tl) - ref(tl)) > 1e-6 for tl in cases.values()), mistake.__name__


def test_recorded_timelines_are_whole_runs():
    """The shipped recordings: 2m busy intervals a rank (a forward and a backward a micro-batch),
    each of positive length, times from the run's first start, ranks 0..p-1."""
    data = json.loads(checks.RECORDED_PATH.read_text())
    assert "torch" in data["about"] and "cores" in data["about"]
    runs = checks.recorded_timelines()
    assert {"gpipe_p2_m1", "gpipe_p2_m8", "1f1b_p2_m8", "gpipe_p4_m8", "1f1b_p4_m8"} <= set(runs)
    for name, tl in runs.items():
        p, m = int(name.split("_p")[1].split("_")[0]), int(name.split("_m")[1])
        assert sorted(tl) == list(range(p)), name
        assert all(len(iv) == 2 * m for iv in tl.values()), name
        assert all(0 <= s < e for iv in tl.values() for s, e in iv), name
        assert min(s for iv in tl.values() for s, _ in iv) == 0.0, name


def test_invalid_timelines_raise_value_error():
    ref = reference_fn(A, "measured_bubble")
    for bad in ({}, {0: [(0.0, 1.0)], 1: []}, {0: [(1.0, 1.0)]}):
        with pytest.raises(ValueError):
            ref(bad)


def test_recorder_sees_gpipe_hold_m_and_1f1b_p_minus_s_in_flight():
    """On 2 gloo ranks with torch.distributed.pipelining: a forward and a backward recorded per
    micro-batch on each stage (interleaved: on each of a rank's 2 chunks); GPipe holds all m
    micro-batches' activations at once, 1F1B p - s; the saved bytes scale the same way; the loss
    does not depend on the schedule, m or the chunks."""
    runs = [("gpipe", 4), ("1f1b", 4), ("gpipe", 2), ("interleaved_1f1b", 4)]
    res = run_ranks(pipeline_rank, 2, runs, 32, 64, 2, timeout_s=60)
    for rank in range(2):
        gpipe, onef, gpipe2, inter = res[rank]
        for r, m, chunks in ((gpipe, 4, [0]), (onef, 4, [0]), (gpipe2, 2, [0]), (inter, 4, [0, 1])):
            assert sorted((e["kind"], e["chunk"], e["mb"]) for e in r["events"]) == sorted(
                (k, c, i) for k in "FB" for c in chunks for i in range(m)
            )
            assert all(e["start"] <= e["end"] for e in r["events"])
        assert gpipe["peak_in_flight"] == 4 and gpipe2["peak_in_flight"] == 2
        assert onef["peak_in_flight"] == 2 - rank
        # GPipe: the whole batch's activations, whatever m; 1F1B: (p - s) of m micro-batches
        assert gpipe["peak_saved_bytes"] == gpipe2["peak_saved_bytes"] > 0
        assert onef["peak_saved_bytes"] * 4 == gpipe["peak_saved_bytes"] * (2 - rank)
    losses = [r["loss"] for r in res[1]]
    assert max(losses) - min(losses) < 1e-5 and res[0][0]["loss"] is None


def test_timed_stage_leaves_outputs_and_gradients_unchanged():
    torch.manual_seed(0)
    inner = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    x = torch.randn(4, 8, requires_grad=True)
    inner(x).square().sum().backward()
    want = [x.grad.clone()] + [p.grad.clone() for p in inner.parameters()]
    x.grad = None
    inner.zero_grad()
    timed = TimedStage(inner)
    timed(x).square().sum().backward()
    got = [x.grad] + [p.grad for p in inner.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert [e["kind"] for e in timed.events] == ["F", "B"]
    assert timed.peak_in_flight == 1
    # saved: x for the first Linear, the ReLU's output (used by it and the second Linear)
    assert timed.peak_saved_bytes >= 2 * 4 * 8 * 4
    with torch.no_grad():
        timed(x)
    assert len(timed.events) == 2  # no-grad forwards are not micro-batches


class _MeshMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(16, 64), nn.Linear(64, 16)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def _save_fsdp(rank, world_size, folder):
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    model = nn.Sequential(_MeshMLP(), _MeshMLP())
    mesh = init_device_mesh("cpu", (world_size,))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    dcp.save(get_model_state_dict(model), checkpoint_id=folder)
    return {k: tuple(v.to_local().shape) for k, v in model.state_dict().items()}


def _load_2d(rank, world_size, folder):
    import logging
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    warnings.filterwarnings("ignore")
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(1)
    model = nn.Sequential(_MeshMLP(), _MeshMLP())
    for block in model:
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    state = get_model_state_dict(model)
    dcp.load(state, checkpoint_id=folder)
    set_model_state_dict(model, state)
    up = model[0].up.weight
    return {
        "values": {k: v.full_tensor() for k, v in model.state_dict().items()},
        "up": (tuple(up.to_local().shape), [type(p).__name__ for p in up.placements]),
        "coordinate": tuple(mesh.get_coordinate()),
    }


@pytest.mark.slow  # 6 ranks started, about 10 s on 2 cores
def test_dcp_reshards_fsdp_on_2_ranks_into_a_2d_mesh_and_one_process(tmp_path):
    """Sections 4 and 7 as they say: on a (dp, tp) = (2, 2) mesh, rank = 2 dp + tp and FSDP over
    "dp" of a column-parallel weight gives a _StridedShard on dp and Shard on tp, a quarter of
    the weight; DCP writes .metadata (each saved chunk's offsets and sizes) and one file per
    saving rank, and loads into the 2x2 mesh and into one process without a process group,
    values equal."""
    import warnings

    import torch.distributed.checkpoint as dcp

    folder = str(tmp_path / "ckpt")
    shapes = run_ranks(_save_fsdp, 2, folder, timeout_s=120)[0]
    assert shapes["0.up.weight"] == (32, 16)
    assert sorted(os.listdir(folder)) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    up = dcp.FileSystemReader(folder).read_metadata().state_dict_metadata["0.up.weight"]
    assert tuple(up.size) == (64, 16)
    assert [(tuple(c.offsets), tuple(c.sizes)) for c in up.chunks] == [
        ((0, 0), (32, 16)),
        ((32, 0), (32, 16)),
    ]
    loaded = run_ranks(_load_2d, 4, folder, timeout_s=120)
    torch.manual_seed(0)
    want = nn.Sequential(_MeshMLP(), _MeshMLP()).state_dict()
    for rank, r in enumerate(loaded):
        assert r["coordinate"] == (rank // 2, rank % 2)
        assert r["up"] == ((16, 16), ["_StridedShard", "Shard"])
        assert all(torch.equal(r["values"][k], v) for k, v in want.items())
    torch.manual_seed(2)
    single = nn.Sequential(_MeshMLP(), _MeshMLP())
    state = single.state_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(state, checkpoint_id=folder)
    assert all(torch.equal(state[k], v) for k, v in want.items())


def huge(*args, **kwargs):
    return 10**400


@pytest.mark.parametrize("name", ["bubble_fraction", "measured_bubble"])
def test_an_int_too_large_for_a_float_fails_cleanly(name):
    """A huge int is not a number the check can compare: a CheckFailed, not an OverflowError
    raised by the check itself."""
    with pytest.raises(CheckFailed, match="return a float"):
        getattr(checks, f"check_{name}")(huge)
