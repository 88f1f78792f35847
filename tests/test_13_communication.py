"""13_parallelism, sections 5 and 6: the checks of ``bus_bandwidth`` and ``mfu`` accept the reference
and answers written differently, reject every listed mistake and name its likely cause; the
reference agrees with nccl-tests' and PaLM's published definitions on worked numbers."""

import inspect

import pytest

from grader.checks.ch13_parallelism import communication as checks
from grader.checks.common import CheckFailed

from .helpers import answer_fn, assert_sample_scores_as_declared, reference_fn, sample_params

A = "13_parallelism"
MINE = ("wrong_busbw_", "correct_busbw_", "wrong_mfu_", "correct_mfu_")


@pytest.mark.parametrize(
    "name, signature",
    [
        ("bus_bandwidth", "(op: str, nbytes: int, seconds: float, world_size: int) -> float"),
        (
            "mfu",
            "(tokens_per_s: float, n_params: int, n_layers: int, seq_len: int, d_model: int, "
            "peak_flops: float, *, hardware: bool = False, recompute: bool = False) -> float",
        ),
    ],
)
def test_reference_has_the_documented_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize("name", ["bus_bandwidth", "mfu"])
def test_reference_passes_every_check(name, capsys):
    getattr(checks, f"check_{name}")(reference_fn(A, name))
    getattr(checks, f"check_{name}_hidden")(reference_fn(A, name))
    assert capsys.readouterr().out.count("OK:") == 2


def test_bus_bandwidth_matches_nccl_tests_definitions():
    bus = reference_fn(A, "bus_bandwidth")
    # 8 ranks, 1 GiB all-reduce in 10 ms: algbw 107.37 GB/s, busbw x 2*7/8 = 187.9 GB/s
    assert bus("all_reduce", 2**30, 0.01, 8) == pytest.approx(2**30 / 0.01 / 1e9 * 14 / 8)
    # all-gather: S is the gathered output (8 x 128 MiB), factor 7/8
    assert bus("all_gather", 8 * 2**27, 0.01, 8) == pytest.approx(2**30 / 0.01 / 1e9 * 7 / 8)
    assert bus("broadcast", 10**9, 1.0, 1) == 1.0  # factor 1 at any n (nccl-tests' broadcast.cu)
    assert bus("all_reduce", 10**9, 1.0, 1) == 0.0  # (n-1)/n = 0: nothing crosses a link
    for op, factor in checks.BUS_FACTORS.items():  # the check's table and the reference agree
        assert bus(op, 10**9, 1.0, 4) == pytest.approx(factor(4))
    for bad in [("all-reduce", 1, 1.0, 2), ("all_reduce", 1, 1.0, 0), ("reduce", 1, 0.0, 2)]:
        with pytest.raises(ValueError):
            bus(*bad)


def test_mfu_matches_palm_flops_count():
    mfu = reference_fn(A, "mfu")
    n, layers, s, d, peak = 124_000_000, 12, 1024, 768, 989e12
    model, hardware = 6 * n + 12 * layers * s * d, 8 * n + 16 * layers * s * d
    assert mfu(1e5, n, layers, s, d, peak) == pytest.approx(1e5 * model / peak)
    assert mfu(1e5, n, layers, s, d, peak, recompute=True) == pytest.approx(1e5 * model / peak)
    assert mfu(1e5, n, layers, s, d, peak, hardware=True) == pytest.approx(1e5 * model / peak)
    got = mfu(1e5, n, layers, s, d, peak, hardware=True, recompute=True)
    assert got == pytest.approx(1e5 * hardware / peak)
    for bad in [(0.0, n, layers, s, d, peak), (1.0, n, layers, s, d, -1.0)]:
        with pytest.raises(ValueError):
            mfu(*bad)


@pytest.mark.parametrize(
    "sample", [p for p in sample_params(A) if p.values[0].name.startswith(MINE)]
)
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


#: Each mistake of this part, the exercise it answers and words its failure message must contain.
CAUSES = [
    ("wrong_busbw_algbw", "bus_bandwidth", "algorithm bandwidth"),
    ("wrong_busbw_allreduce_factor_everywhere", "bus_bandwidth", "all-reduce's alone"),
    ("wrong_busbw_gibibytes", "bus_bandwidth", "GiB/s"),
    ("wrong_busbw_inverted_factor", "bus_bandwidth", "Do not divide by n - 1"),
    ("wrong_busbw_allgather_per_rank_size", "bus_bandwidth", "do not multiply it by the world"),
    ("wrong_busbw_one_rank_nonzero", "bus_bandwidth", "nothing crosses a link"),
    ("wrong_busbw_no_value_error", "bus_bandwidth", "raise ValueError"),
    ("wrong_busbw_negative_world_size", "bus_bandwidth", "negative too"),
    ("wrong_busbw_op_any_case", "bus_bandwidth", "in lower case"),
    ("wrong_mfu_two_n", "mfu", "6·N FLOPs per token"),
    ("wrong_mfu_no_attention", "mfu", "is missing"),
    ("wrong_mfu_attention_six", "mfu", "Kaplan"),
    ("wrong_mfu_recompute_changes_mfu", "mfu", "MFU does not change with recomputation"),
    ("wrong_mfu_hfu_ignores_recompute", "mfu", "HFU counts what the hardware ran"),
    ("wrong_mfu_percent", "mfu", "percentage"),
    ("wrong_mfu_peak_in_tflops", "mfu", "not TFLOP/s"),
    ("wrong_mfu_no_value_error", "mfu", "raise ValueError"),
    ("wrong_mfu_int_validation", "mfu", "below 1 too"),
]


@pytest.mark.parametrize("sample, name, cause", CAUSES)
def test_each_mistake_is_named_in_the_failure(sample, name, cause, capsys):
    fn = answer_fn(A, sample, name)
    with pytest.raises(CheckFailed) as failure:
        getattr(checks, f"check_{name}")(fn)
        getattr(checks, f"check_{name}_hidden")(fn)
    assert cause in str(failure.value), str(failure.value)


def test_every_mistake_of_this_part_has_its_cause_checked():
    """A new wrong_busbw_/wrong_mfu_ sample needs its cause in CAUSES."""
    from grader.tools.samples import load_samples

    wrong = {s.name for s in load_samples(A) if s.name.startswith(("wrong_busbw_", "wrong_mfu_"))}
    assert wrong == {sample for sample, _, _ in CAUSES}


def _rank_demo_collectives(rank, world_size):
    """The calls of section 5's benchmark (code-c01), with the values they produce."""
    import warnings

    import torch
    import torch.distributed as dist

    warnings.simplefilter("ignore", FutureWarning)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    full, piece = torch.zeros(2 * world_size), torch.full((2,), float(rank))
    gather(full, piece)  # output first: the S-byte gathered buffer
    summed = torch.empty(2)
    scatter(summed, torch.arange(2.0 * world_size) + rank)  # output first: this rank's 1/n
    return full.tolist(), summed.tolist()


def test_the_benchmark_collectives_gather_and_scatter_on_gloo():
    """Section 5 calls all_gather_single/reduce_scatter_single (torch 2.14) or the *_tensor
    collectives (2.11) with the output first, on gloo CPU ranks."""
    from grader.runtime.distributed import run_ranks

    results = run_ranks(_rank_demo_collectives, 2, timeout_s=60)
    for rank, (gathered, summed) in enumerate(results):
        assert gathered == [0.0, 0.0, 1.0, 1.0]
        assert summed == [2.0 * (2 * rank) + 1, 2.0 * (2 * rank + 1) + 1]


def huge(*args, **kwargs):
    return 10**400


@pytest.mark.parametrize("name", ["bus_bandwidth", "mfu"])
def test_an_int_too_large_for_a_float_fails_cleanly(name):
    """A huge int is not a number the check can compare: a CheckFailed, not an OverflowError
    raised by the check itself."""
    with pytest.raises(CheckFailed):
        getattr(checks, f"check_{name}")(huge)
