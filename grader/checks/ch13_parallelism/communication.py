"""Checks for 13_parallelism, part: communication measured and utilization (sections 5 and 6).

* ``check_bus_bandwidth``: ``bus_bandwidth(op, nbytes, seconds, world_size)`` against nccl-tests'
  definitions (``doc/PERFORMANCE.md`` and ``src/*.cu`` of NVIDIA/nccl-tests: ``algbw = S / t``;
  ``busbw = algbw × 2(n−1)/n`` for all-reduce, ``× (n−1)/n`` for all-gather, reduce-scatter and
  all-to-all, ``× 1`` for broadcast and reduce; ``S`` the full buffer: for all-gather the gathered
  output, ``n × per-rank input``), in GB/s (1e9 bytes/s), one rank included (factor 0 for the
  first four: nothing crosses a link), and ValueError for an unknown op, a world size below 1
  or a time that is not positive.
* ``check_mfu``: ``mfu(tokens_per_s, n_params, n_layers, seq_len, d_model, peak_flops, *,
  hardware, recompute)`` against PaLM's count (Chowdhery et al. 2022, appendix B): model FLOPs
  per token ``6·N + 12·L·s·d`` (``d`` = heads × head dim), MFU = model FLOP/s ÷ peak; HFU adds
  the recomputed forward under full activation recomputation (``8·N + 16·L·s·d``); a fraction.

Both exercises are pure functions: the probe :func:`grader.runtime.remote.attempt_all` calls the
student's function on every case where it lives and hands back plain records; the verdicts are
computed here against the reference (the solution notebook's, :func:`grader.runtime.course.
reference`), and a wrong value is matched against the typical mistakes to name the likely cause.
May import :mod:`grader.checks.common` and :mod:`grader.runtime` only.
"""

from __future__ import annotations

import math

from grader.checks.common import CheckFailed, call_student, fail, passed
from grader.runtime.course import reference
from grader.runtime.remote import Recorded, attempt_all, student

ASSIGNMENT = "13_parallelism"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True

#: Relative tolerance of a value: the same formula in another order of operations stays far within.
_RTOL = 1e-9


def _close(got, want: float) -> bool:
    if not _number(got):
        return False
    return abs(got - want) <= _RTOL * max(abs(want), 1e-300) or (want == 0 and got == 0)


def _number(got) -> bool:
    """A finite int or float (not a bool; not an int too large for a float)."""
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        return False
    try:
        return math.isfinite(float(got))
    except OverflowError:
        return False


def _matches(got, candidates: dict[str, float]) -> list[str]:
    """The named alternative values that ``got`` equals, in order."""
    if not _number(got):
        return []
    return [c for c, value in candidates.items() if value is not None and _close(got, value)]


def _likely_cause(wrong: list[tuple[object, dict[str, float]]]) -> str | None:
    """The cause that explains the first wrong value and, where it can be told, all the others.

    ``wrong`` holds ``(value, {cause: the value that cause gives})`` of each failed case. Some
    mistakes give the same value in one case (at 2 ranks ``(n-1)/n × n`` equals ``2(n-1)/n``),
    so a cause that explains every wrong value it applies to wins over one that explains the
    first alone.
    """
    first = _matches(*wrong[0])
    for cause in first:
        if all(cause not in cands or cause in _matches(got, cands) for got, cands in wrong):
            return cause
    return first[0] if first else None


def _expect_value_errors(answers: Recorded, label: str, bad: list, why: str) -> None:
    for args, kwargs in bad:
        try:
            value = answers(*args, **kwargs)
        except ValueError:
            continue
        except Exception as exc:  # noqa: BLE001 - any other outcome is the failure below
            yours = f"raised {type(exc).__name__}: {exc}"
        else:
            yours = f"returned {value!r}"
        shown = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
        fail(f"{label}({shown})", yours=yours, expected="raises ValueError", cause=why)


# --------------------------------------------------------------------------- bus_bandwidth
#: The operations and nccl-tests' correction factor of each (doc/PERFORMANCE.md, "Summary").
BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def _bus_cases(hidden: bool) -> list[tuple[str, int, float, int]]:
    """Every op on world sizes 1 (factor 0 or 1), 2, 3 and 8 (hidden: 4, 7 and 64 with other sizes)."""
    sizes = [(16 * 2**20, 2.5e-3), (4096, 3.1e-5), (1_000_003, 7.7e-4)]
    worlds = [4, 7, 64] if hidden else [1, 2, 3, 8]
    if hidden:
        sizes = [(2**30, 0.0123), (12_345, 1.7e-5)]
    return [(op, s, t, n) for op in BUS_FACTORS for n in worlds for s, t in sizes]


_BUS_BAD = [
    (("allreduce", 2**20, 1e-3, 4), {}),
    (("all-gather", 2**20, 1e-3, 4), {}),
    (("All_Reduce", 2**20, 1e-3, 4), {}),  # names are exact
    (("all_reduce", 2**20, 1e-3, 0), {}),
    (("all_gather", 2**20, 1e-3, -2), {}),  # below 1, not only 0
    (("all_reduce", 2**20, 0.0, 4), {}),
    (("broadcast", 2**20, -1e-3, 4), {}),
]


def _bus_causes(op: str, nbytes: int, seconds: float, n: int, want: float) -> dict[str, float]:
    algbw = nbytes / seconds / 1e9
    factor = BUS_FACTORS[op](n)
    causes = {
        "you returned bytes/s: GB/s is bytes/s divided by 1e9": want * 1e9,
        "you used GiB/s (2**30 bytes/s); nccl-tests reports GB/s, 1e9 bytes/s": (
            want * 1e9 / 2**30
        ),
        "you used MB/s or divided by 1e6: GB/s is 1e9 bytes/s": want * 1e3,
    }
    if n > 1:
        causes["you inverted the factor: it is (n-1)/n (or 2(n-1)/n), below 1, not n/(n-1)"] = (
            algbw / factor if factor else None
        )
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        causes[
            f"nbytes is already nccl-tests' size S, the full buffer ({op}: n × the per-rank "
            "piece); do not multiply it by the world size again"
        ] = want * n
        causes[f"{op}'s factor is (n-1)/n; 2(n-1)/n is all-reduce's alone"] = (
            algbw * 2 * (n - 1) / n
        )
    if op in ("broadcast", "reduce"):
        causes[
            f"{op} has factor 1 (all the data leaves or reaches the root: t = S/B); 2(n-1)/n is "
            "all-reduce's alone"
        ] = algbw * 2 * (n - 1) / n
        causes[f"{op} has factor 1, not (n-1)/n: the root's link carries all S bytes"] = (
            algbw * (n - 1) / n
        )
    causes[
        "you returned the algorithm bandwidth S/t; the bus bandwidth multiplies it by the op's "
        "factor (2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all)"
    ] = algbw
    return causes


def _check_bus(bus_bandwidth, cases) -> None:
    ref = reference(ASSIGNMENT).bus_bandwidth
    calls = [((op, s, t, n), {}) for op, s, t, n in cases]
    records = bus_bandwidth.probe(attempt_all, calls + _BUS_BAD)
    answers = Recorded("bus_bandwidth", calls + _BUS_BAD, records)
    wrong = []
    for op, s, t, n in cases:
        want = ref(op, s, t, n)
        what = f"bus_bandwidth({op!r}, nbytes={s}, seconds={t}, world_size={n})"
        try:
            got = call_student(answers, op, s, t, n, name="bus_bandwidth")
        except CheckFailed as exc:
            if n == 1:
                raise CheckFailed(
                    f"{exc}\n  Likely cause: with one rank nothing crosses a link: nccl-tests' "
                    f"factor is (n-1)/n = 0 (2(n-1)/n = 0 for all-reduce), so busbw is 0.0; "
                    "broadcast and reduce keep factor 1. Do not divide by n - 1."
                ) from exc.__cause__
            raise
        if not _close(got, want):
            wrong.append((what, op, n, got, want, _bus_causes(op, s, t, n, want)))
    if wrong:
        what, op, n, got, want, _ = wrong[0]
        cause = _likely_cause([(g, c) for _, o, _, g, _, c in wrong if o == op])
        if cause is None and n == 1:
            cause = (
                "with one rank nothing crosses a link: nccl-tests' factor (n-1)/n is 0, so busbw "
                "is 0.0 for all-reduce, all-gather, reduce-scatter and all-to-all (1 for "
                "broadcast and reduce)"
            )
        fail(
            what,
            yours=got,
            expected=f"{want:.12g} GB/s",
            cause=cause
            or (
                "busbw = nbytes / seconds / 1e9 × the op's factor: 2(n-1)/n all-reduce; (n-1)/n "
                "all-gather, reduce-scatter, all-to-all; 1 broadcast, reduce"
            ),
        )
    _expect_value_errors(
        answers,
        "bus_bandwidth",
        _BUS_BAD,
        "raise ValueError for an op outside all_reduce, all_gather, reduce_scatter, all_to_all, "
        "broadcast, reduce (spelled exactly so, in lower case), for world_size < 1 (negative "
        "too, not only 0) and for seconds <= 0",
    )


def check_bus_bandwidth(bus_bandwidth) -> None:
    """Compare with nccl-tests' bus bandwidth on the six ops at 1, 2, 3 and 8 ranks (72 cases).

    Raises:
        CheckFailed: a value differs (the message names the likely mistake), or an unknown op,
            a world size below 1 or a non-positive time does not raise ValueError.
    """
    bus_bandwidth = student(bus_bandwidth, "bus_bandwidth")
    _check_bus(bus_bandwidth, _bus_cases(hidden=False))
    passed("bus_bandwidth follows nccl-tests: algbw = S/t, busbw = algbw × the op's factor, GB/s")


def check_bus_bandwidth_hidden(bus_bandwidth) -> None:
    """The same at 4, 7 and 64 ranks with other sizes (36 cases)."""
    bus_bandwidth = student(bus_bandwidth, "bus_bandwidth")
    _check_bus(bus_bandwidth, _bus_cases(hidden=True))
    passed("bus_bandwidth agrees at 4, 7 and 64 ranks too")


# --------------------------------------------------------------------------- mfu
def _mfu_cases(hidden: bool) -> list[tuple]:
    """(tokens/s, N, L, s, d, peak) for models where the attention term matters (5% to 60% of
    the FLOPs), each asked for MFU, HFU without and HFU with recomputation."""
    shapes = (
        [
            (4.0e4, 124_000_000, 12, 1024, 768, 989e12),  # GPT-2 small on an H100's bf16 peak
            (1.3e3, 6_700_000_000, 32, 4096, 4096, 989e12),
            (2.0e3, 1_000_000, 2, 8192, 128, 1.5e11),  # a long sequence: attention dominates
        ]
        if not hidden
        else [
            (238_300.0 / 6144, 8_000_000_000, 32, 2048, 4096, 275e12),
            (5.5e5, 350_000_000, 24, 2048, 1024, 312e12),
            # half a token per second (a 70B model on one GPU), then the first visible model's
            # rates scaled by 1e-15 (a peak below 1 FLOP/s): any positive rates are valid
            (0.5, 70_000_000_000, 80, 4096, 8192, 989e12),
            (4.0e4 * 1e-15, 124_000_000, 12, 1024, 768, 989e12 * 1e-15),
        ]
    )
    modes = [(False, False), (False, True), (True, False), (True, True)]
    return [(*shape, hw, rc) for shape in shapes for hw, rc in modes]


_MFU_BAD = [
    ((0.0, 1_000_000, 2, 128, 64, 1e12), {}),
    ((-5.0, 1_000_000, 2, 128, 64, 1e12), {}),
    ((1e3, 1_000_000, 2, 128, 64, 0.0), {}),
    ((1e3, 1_000_000, 2, 128, 64, -1e12), {"hardware": True}),
]


def _mfu_causes(tok, n, layers, s, d, peak, hw, rc, want) -> dict[str, float]:
    att = layers * s * d

    def frac(per_token):
        return tok * per_token / peak

    model = 6 * n + 12 * att
    hardware = 8 * n + 16 * att
    causes = {
        "you returned a percentage: return a fraction (0.42, not 42)": want * 100,
        "peak_flops is in FLOP/s already, not TFLOP/s: do not scale it (or the FLOPs) by 1e12": (
            want / 1e12
        ),
    }
    if rc and not hw:
        causes[
            "MFU does not change with recomputation: it counts the model's FLOPs (6N + 12·L·s·d "
            "per token) however many the hardware ran; only HFU adds the recomputed forward"
        ] = frac(hardware)
    if rc and hw:
        causes[
            "HFU counts what the hardware ran: with full recomputation one more forward, "
            "2N + 4·L·s·d per token, so 8N + 16·L·s·d"
        ] = frac(model)
    extra = (2 * n + 4 * att) if (hw and rc) else 0
    causes.update(
        {
            "a training step costs 6·N FLOPs per token (forward 2N, backward 4N), not 2·N": frac(
                2 * n + 12 * att + extra
            ),
            "2·N is the forward alone; training is 6·N, and the attention term is missing too": (
                frac(2 * n + extra)
            ),
            "the attention term 12·L·s·d (PaLM appendix B: 12·L·H·Q·T, H·Q = d_model) is missing": (
                frac(6 * n + extra - (4 * att if extra else 0))
            ),
            "the attention term is 12·L·s·d (PaLM appendix B, what the exercise asks); "
            "6·L·s·d is Kaplan et al.'s count": frac(6 * n + 6 * att + extra),
        }
    )
    return causes


def _check_mfu(mfu, cases) -> None:
    ref = reference(ASSIGNMENT).mfu
    calls = [((tok, n, layers, s, d, peak), {"hardware": hw, "recompute": rc})
             for tok, n, layers, s, d, peak, hw, rc in cases]  # fmt: skip
    records = mfu.probe(attempt_all, calls + _MFU_BAD)
    answers = Recorded("mfu", calls + _MFU_BAD, records)
    wrong = []
    for (args, kwargs), case in zip(calls, cases):
        want = ref(*args, **kwargs)
        what = f"mfu{args} with hardware={kwargs['hardware']}, recompute={kwargs['recompute']}"
        try:
            got = call_student(answers, *args, name="mfu", **kwargs)
        except CheckFailed as exc:
            if "ValueError" not in str(exc):
                raise
            raise CheckFailed(
                f"{exc}\n  Likely cause: {what}: every positive tokens_per_s and peak_flops is "
                "valid, below 1 too (half a token per second; rates in other units): refuse "
                "only values <= 0"
            ) from exc.__cause__
        if not _close(got, want):
            wrong.append((what, got, want, _mfu_causes(*case, want)))
    if wrong:
        what, got, want, _ = wrong[0]
        cause = _likely_cause([(g, c) for _, g, _, c in wrong]) or (
            "model FLOPs per token = 6·N + 12·L·s·d; HFU with recompute adds 2·N + 4·L·s·d; "
            "utilization = tokens/s × FLOPs per token / peak FLOP/s, a fraction"
        )
        fail(what, yours=got, expected=f"{want:.12g}", cause=cause)
    _expect_value_errors(
        answers, "mfu", _MFU_BAD, "raise ValueError when tokens_per_s or peak_flops is not positive"
    )


def check_mfu(mfu) -> None:
    """Compare with PaLM's FLOPs count on three models (12 cases: MFU, HFU, HFU with recompute,
    MFU with recompute) and require ValueError for a non-positive throughput or peak.

    Raises:
        CheckFailed: a value differs (the message names the likely mistake) or no ValueError.
    """
    mfu = student(mfu, "mfu")
    _check_mfu(mfu, _mfu_cases(hidden=False))
    passed("mfu counts 6N + 12·L·s·d per token (HFU adds the recomputed forward), as a fraction")


def check_mfu_hidden(mfu) -> None:
    """The same on two other models, half a token per second, and rates scaled by 1e-15 (16
    cases)."""
    mfu = student(mfu, "mfu")
    _check_mfu(mfu, _mfu_cases(hidden=True))
    passed("mfu agrees on two more models")
