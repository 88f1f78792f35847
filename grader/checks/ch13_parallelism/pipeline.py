"""Checks for 13_parallelism, part 3 (pipeline parallelism): ``bubble_fraction`` and
``measured_bubble``.

Both exercises are functions of plain numbers, so their checks call the student's function
through :mod:`grader.runtime.remote` (:func:`~grader.runtime.remote.attempt_all`: every call
made where the student's code lives, the outcomes handed back as plain data) and judge here:

* ``bubble_fraction(p, m, schedule, virtual_stages)`` against the reference solution on a grid of
  stage counts, micro-batch counts and schedules (GPipe, 1F1B, interleaved 1F1B), and a
  ``ValueError`` for each invalid input the statement names;
* ``measured_bubble(timelines)`` against the reference on three kinds of timelines: recorded
  from real ``torch.distributed.pipelining`` runs on gloo ranks (:data:`RECORDED`, made by
  :func:`grader.runtime.pipeline_timeline.pipeline_rank` and committed beside this module, so
  the check is fast and deterministic), ideal GPipe and 1F1B schedules made here by
  :func:`schedule_timeline` (their bubble equals ``(p-1)/(m+p-1)`` exactly), and edge cases
  (unsorted, touching, overlapping and nested intervals, a rank with one interval, ranks not
  numbered 0..n-1), and a ``ValueError`` for the invalid timelines the statement names.

A wrong value is compared with each listed mistake's value (the ``_MISTAKES`` tables), so the
message names the one the answer made. May import :mod:`grader.checks.common` and
:mod:`grader.runtime` only.
"""

from __future__ import annotations

import json
from pathlib import Path

from grader.checks.common import CheckFailed, call_student, expect_raises, fail, passed
from grader.runtime.course import reference
from grader.runtime.remote import Recorded, attempt_all, student

ASSIGNMENT = "13_parallelism"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True

#: Per-rank (start, end) intervals in seconds recorded from real runs (see the file's "about").
RECORDED_PATH = Path(__file__).with_name("pipeline_timelines.json")


def recorded_timelines() -> dict[str, dict[int, list[tuple[float, float]]]]:
    """The recorded runs: ``{"gpipe_p2_m4": {0: [(start, end), ...], 1: [...]}, ...}``
    (seconds from the run's first start; ranks as ints)."""
    data = json.loads(RECORDED_PATH.read_text())
    return {
        name: {int(rank): [tuple(iv) for iv in ivs] for rank, ivs in run.items()}
        for name, run in data["runs"].items()
    }


# --------------------------------------------------------------------------- bubble_fraction
def _ratio_to_ideal(p, m, schedule, v):
    return (p - 1) / (v * m)


def _p_over_m_plus_p(p, m, schedule, v):
    return p / (v * m + p)


def _off_by_one(p, m, schedule, v):
    return (p - 1) / (v * m + p)


def _interleaved_both_divided(p, m, schedule, v):
    return ((p - 1) / v) / ((m + p - 1) / v)


def _m_clamped_to_p(p, m, schedule, v):
    return (p - 1) / (v * max(m, p) + p - 1)


#: What 1F1B with fewer micro-batches than stages is: PyTorch's ``Schedule1F1B`` refuses it
#: (torch 2.14.1: "Number of microbatches (m) must be greater than or equal to the number of
#: stages (p)"), but the schedule is still defined and the exercise asks for its idle share.
_FEW_MICRO_BATCHES = (
    "1F1B with m < p is still a schedule: every stage's warm-up holds all m micro-batches, so it "
    "runs as GPipe does and its idle share is (p-1)/(m+p-1). PyTorch's Schedule1F1B refuses m < "
    "p (it would gain nothing over GPipe), but the exercise asks for the value the formula "
    "defines: return it, do not raise, and do not count m as if it were p"
)


#: (how the mistake computes, what to tell the student); the first that matches is named.
_BUBBLE_MISTAKES = [
    (
        _ratio_to_ideal,
        "you returned (p-1)/m, Megatron's ratio of the bubble time to the ideal time m(t_f+t_b); "
        "the exercise asks for the idle share of the whole run: bubble / (ideal + bubble) = "
        "(p-1)/(m+p-1)",
    ),
    (
        _p_over_m_plus_p,
        "p/(m+p) counts p fill-and-drain slots; the first stage starts at once and the last "
        "one waits p-1 slots: (p-1)/(m+p-1)",
    ),
    (
        _off_by_one,
        "an off-by-one in the run's length: it lasts m+p-1 slots (the last micro-batch enters "
        "the first stage in slot m and leaves the last stage p-1 slots later), not m+p",
    ),
    (
        _interleaved_both_divided,
        "with v virtual stages per rank the fill and drain shrink by v (each chunk is 1/v of "
        "the layers) but the work does not: (p-1)/(v*m+p-1); dividing both terms by v cancels",
    ),
]


def _bubble_cases():
    """Valid calls: ``(p, m, schedule, virtual_stages)``."""
    grid = [(p, m) for p in (1, 2, 4, 8) for m in (1, 4, 8, 32)]
    # 1F1B with m < p last: an answer right for m >= p and wrong below is told why
    cases = [(p, m, "gpipe", 1) for p, m in grid]
    cases += sorted(((p, m, "1f1b", 1) for p, m in grid), key=lambda c: c[1] < c[0])
    cases += [(4, 8, "interleaved_1f1b", 2), (8, 16, "interleaved_1f1b", 4)]
    cases += [(4, 4, "interleaved_1f1b", 1), (2, 6, "interleaved_1f1b", 3)]
    return cases


def _bubble_cases_hidden():
    return [
        (3, 5, "gpipe", 1),
        (16, 3, "gpipe", 1),
        (7, 7, "1f1b", 1),
        (16, 3, "1f1b", 1),
        (5, 4, "1f1b", 1),
        (64, 256, "1f1b", 1),
        (8, 64, "interleaved_1f1b", 2),
        (3, 9, "interleaved_1f1b", 5),
        (1, 4, "interleaved_1f1b", 4),
    ]


#: Calls that must raise ValueError, with what the statement says about them.
_BUBBLE_INVALID = [
    ((4, 8, "zero_bubble", 1), "an unknown schedule"),
    ((4, 8, "GPipe ", 1), "an unknown schedule (names are exact: 'gpipe', '1f1b', ...)"),
    ((0, 8, "gpipe", 1), "p < 1"),
    ((4, 0, "1f1b", 1), "m < 1"),
    ((4, 8, "1f1b", 2), "virtual_stages != 1 with a schedule that is not interleaved"),
    ((4, 8, "gpipe", 2), "virtual_stages != 1 with a schedule that is not interleaved"),
    ((4, 8, "interleaved_1f1b", 0), "virtual_stages < 1"),
    ((4, 6, "interleaved_1f1b", 2), "interleaved 1F1B with m not a multiple of p"),
]

#: Hidden invalid calls: negative counts (not only 0) and Megatron's rule with v = 1 too.
_BUBBLE_INVALID_HIDDEN = [
    ((-2, 8, "gpipe", 1), "p < 1 (negative too, not only 0)"),
    ((4, -3, "1f1b", 1), "m < 1 (negative too, not only 0)"),
    ((4, 8, "interleaved_1f1b", -1), "virtual_stages < 1 (negative too, not only 0)"),
    ((4, 8, "1F1B", 1), "an unknown schedule (names are exact: '1F1B' is not '1f1b')"),
    (
        (4, 6, "interleaved_1f1b", 1),
        "interleaved 1F1B with m not a multiple of p, whatever virtual_stages (v = 1 included)",
    ),
]


def _bubble_call(args):
    p, m, sched, v = args
    return ((p, m), {"schedule": sched, "virtual_stages": v})


def _is_number(x) -> bool:
    """An int or float (not a bool) that a float can hold (a huge int is not one)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        float(x)
    except OverflowError:
        return False
    return True


def _close(mistake: float, got: float) -> bool:
    """Whether ``got`` is what a mistake computes (relative tolerance 1e-9)."""
    return abs(mistake - got) <= 1e-9 * max(1.0, abs(got))


def _check_bubble(bubble_fraction, cases, invalid) -> None:
    ref = reference(ASSIGNMENT).bubble_fraction
    calls = [_bubble_call(c) for c in cases] + [_bubble_call(a) for a, _ in invalid]
    answers = Recorded("bubble_fraction", calls, bubble_fraction.probe(attempt_all, calls))
    gpipe = {}
    for case in cases:
        p, m, sched, v = case
        (args, kwargs) = _bubble_call(case)
        want = ref(*args, **kwargs)
        what = f"bubble_fraction({p}, {m}, schedule={sched!r}, virtual_stages={v})"
        try:
            got = call_student(answers, *args, name="bubble_fraction", **kwargs)
        except CheckFailed as exc:
            if sched == "1f1b" and m < p:
                fail(what, yours=str(exc).splitlines()[0], expected=want, cause=_FEW_MICRO_BATCHES)
            raise
        if _is_number(got) and abs(got - want) <= 1e-12 + 1e-9 * abs(want):
            if sched == "gpipe":
                gpipe[(p, m)] = got
            continue
        if not _is_number(got):
            fail(what, yours=got, expected=want, cause="return a float (the idle share, 0 to 1)")
        if sched == "1f1b" and m < p and _close(_m_clamped_to_p(p, m, sched, v), got):
            cause = _FEW_MICRO_BATCHES
        else:
            cause = next(
                (
                    text
                    for mistake, text in _BUBBLE_MISTAKES
                    if _close(mistake(p, m, sched, v), got)
                ),
                None,
            )
        if (
            sched == "1f1b"
            and cause != _FEW_MICRO_BATCHES
            and got < want
            and (cause is None or (p, m) in gpipe)
        ):
            # GPipe's value for the same p and m passed: the mistake is 1F1B's own
            cause = (
                "1F1B has the same bubble as GPipe, (p-1)/(m+p-1): its fill and drain are as "
                "long; what it saves is memory (at most p micro-batches in flight on the first "
                "stage instead of m)"
            )
        fail(
            what,
            yours=got,
            expected=want,
            cause=cause
            or "a run of m micro-batches on p stages lasts (m+p-1)(t_f+t_b) and each stage is "
            "busy m(t_f+t_b): the idle share is (p-1)/(m+p-1); with v virtual stages per rank "
            "(p-1)/(v*m+p-1)",
        )
    for args, why in invalid:
        (a, kw) = _bubble_call(args)
        expect_raises(
            ValueError,
            answers,
            *a,
            **kw,
            what=f"bubble_fraction({args[0]}, {args[1]}, schedule={args[2]!r}, "
            f"virtual_stages={args[3]}): {why}",
            cause=f"raise ValueError with a clear message for {why}",
        )


def check_bubble_fraction(bubble_fraction) -> None:
    """Compare with the bubble of GPipe, 1F1B (m < p included) and interleaved 1F1B on 36 cases
    (p from 1 to 8, m from 1 to 32) and require ValueError for 8 invalid calls.

    Raises:
        CheckFailed: a value differs (the message names the mistake it matches), or an invalid
            call does not raise ValueError.
    """
    bubble_fraction = student(bubble_fraction, "bubble_fraction")
    _check_bubble(bubble_fraction, _bubble_cases(), _BUBBLE_INVALID)
    passed("bubble_fraction is (p-1)/(v*m+p-1) for GPipe, 1F1B and interleaved 1F1B")


def check_bubble_fraction_hidden(bubble_fraction) -> None:
    """Other stage, micro-batch and virtual-stage counts (1F1B with m < p too); ValueError for
    negative counts and for interleaved 1F1B with m not a multiple of p at v = 1."""
    bubble_fraction = student(bubble_fraction, "bubble_fraction")
    _check_bubble(bubble_fraction, _bubble_cases_hidden(), _BUBBLE_INVALID_HIDDEN)
    passed("bubble_fraction is right for other p, m and v, and rejects other invalid calls")


# --------------------------------------------------------------------------- schedules
def schedule_timeline(
    p: int, m: int, t_f: float, t_b: float, schedule: str
) -> dict[int, list[tuple[float, float]]]:
    """The per-rank busy intervals of an ideal pipeline: every forward takes ``t_f`` and every
    backward ``t_b`` seconds on every stage, communication takes no time, and each operation
    starts as soon as its stage is free and its input is there (the forward of micro-batch i on
    the previous stage, the backward of i on the next; on the last stage, its own forward).

    Args:
        p: Stages (one per rank).
        m: Micro-batches.
        t_f, t_b: Durations of one micro-batch's forward and backward on one stage, seconds.
        schedule: ``"gpipe"`` (all forwards, then all backwards) or ``"1f1b"`` (PipeDream-Flush:
            ``p-1-s`` forwards on stage s, then one forward and one backward alternately, then
            the remaining backwards).

    Returns:
        ``{rank: [(start, end), ...]}`` in the order each stage runs them.
    """
    orders = {}
    for s in range(p):
        if schedule == "gpipe":
            orders[s] = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
        else:
            warm = min(p - 1 - s, m)
            order = [("F", i) for i in range(warm)]
            for i in range(m - warm):
                order += [("F", warm + i), ("B", i)]
            order += [("B", i) for i in range(m - warm, m)]
            orders[s] = order
    done: dict[tuple[str, int, int], float] = {}
    free = dict.fromkeys(range(p), 0.0)
    nxt = dict.fromkeys(range(p), 0)
    out: dict[int, list[tuple[float, float]]] = {s: [] for s in range(p)}
    while any(nxt[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            if nxt[s] == len(orders[s]):
                continue
            kind, i = orders[s][nxt[s]]
            if kind == "F":
                dep = ("F", s - 1, i) if s > 0 else None
            else:
                dep = ("B", s + 1, i) if s < p - 1 else ("F", s, i)
            if dep is not None and dep not in done:
                continue
            start = max(free[s], done.get(dep, 0.0) if dep else 0.0)
            end = start + (t_f if kind == "F" else t_b)
            done[(kind, s, i)] = end
            free[s] = end
            out[s].append((start, end))
            nxt[s] += 1
            progressed = True
        if not progressed:  # pragma: no cover - the orders above never deadlock
            raise RuntimeError(f"schedule {schedule} p={p} m={m} deadlocks")
    return out


# --------------------------------------------------------------------------- measured_bubble
def _union(intervals) -> float:
    busy, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if e > end:
            busy += e - max(s, end)
            end = e
    return busy


def _per_rank_span(tl):
    busy = sum(_union(iv) for iv in tl.values())
    spans = sum(max(e for _, e in iv) - min(s for s, _ in iv) for iv in tl.values())
    return 1 - busy / spans


def _mean_of_ranks(tl):
    fracs = [1 - _union(iv) / (max(e for _, e in iv) - min(s for s, _ in iv)) for iv in tl.values()]
    return sum(fracs) / len(fracs)


def _span(tl):
    return max(e for iv in tl.values() for _, e in iv) - min(s for iv in tl.values() for s, _ in iv)


def _sum_of_durations(tl):
    return 1 - sum(e - s for iv in tl.values() for s, e in iv) / (len(tl) * _span(tl))


def _span_rank0_durations(tl):
    rank0 = tl[min(tl)]
    return 1 - sum(_union(iv) for iv in tl.values()) / (len(tl) * sum(e - s for s, e in rank0))


def _rank0_only(tl):
    rank0 = tl[min(tl)]
    return 1 - _union(rank0) / (max(e for _, e in rank0) - min(s for s, _ in rank0))


def _union_last_end(intervals) -> float:
    busy, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        busy += max(0.0, e - max(s, end))
        end = e  # the mistake: the last interval's end, not the furthest so far
    return busy


def _forgets_furthest_end(tl):
    return 1 - sum(_union_last_end(iv) for iv in tl.values()) / (len(tl) * _span(tl))


def _span_from_zero(tl):
    return 1 - sum(_union(iv) for iv in tl.values()) / (
        len(tl) * max(e for iv in tl.values() for _, e in iv)
    )


def _union_from_zero(intervals) -> float:
    busy, end = 0.0, 0.0  # the mistake: the union starts at time 0, not at -inf
    for s, e in sorted(intervals):
        if e > end:
            busy += e - max(s, end)
            end = e
    return busy


def _merges_from_zero(tl):
    return 1 - sum(_union_from_zero(iv) for iv in tl.values()) / (len(tl) * _span(tl))


def _rank0_global_span(tl):
    return 1 - _union(tl[min(tl)]) / _span(tl)


_MEASURED_MISTAKES = [
    (
        _per_rank_span,
        "you divided by the sum of each rank's own span (its first start to its last end); "
        "the bubble is counted over the whole run: number of ranks x (last end on any rank - "
        "first start on any rank). A rank that starts late was idle before it started",
    ),
    (
        _mean_of_ranks,
        "you averaged per-rank fractions, each over that rank's own span; use one span for "
        "every rank, the whole run's (first start on any rank to last end on any rank)",
    ),
    (
        _sum_of_durations,
        "you summed the intervals' durations: where intervals on one rank overlap, that time "
        "is counted twice. Sort each rank's intervals and add the length of their union",
    ),
    (
        _forgets_furthest_end,
        "your union keeps the end of the last interval seen; keep the furthest end so far "
        "(max of the ends): after an interval inside another, the next one overlaps the outer "
        "interval, not the inner one",
    ),
    (
        _merges_from_zero,
        "your union of a rank's intervals starts from time 0 (covered = 0.0): work before 0 "
        "is not counted. Recorded times have any origin and may be negative (relative to a "
        "mark taken mid-run): start the union at float('-inf'), or at the first interval",
    ),
    (
        _span_from_zero,
        "you took the span as the last end, as if the run started at time 0; it starts at the "
        "first start on any rank (recorded times have any origin, e.g. time.perf_counter())",
    ),
    (
        _span_rank0_durations,
        "you took the span as the sum of rank 0's durations; the span is wall-clock time, "
        "last end on any rank minus first start on any rank",
    ),
    (
        _rank0_only,
        "you used rank 0 alone; every rank's busy time counts, over the whole run's span",
    ),
    (
        _rank0_global_span,
        "you used rank 0's busy time alone; add every rank's, and multiply the span by the "
        "number of ranks",
    ),
]


def _edge_cases() -> dict[str, dict[int, list[tuple[float, float]]]]:
    return {
        "unsorted intervals": {
            0: [(0.5, 0.75), (0.0, 0.25), (0.25, 0.5)],
            1: [(0.75, 1.0), (0.25, 0.5)],
        },
        "a rank with one interval": {0: [(0.0, 1.0)], 1: [(0.5, 0.75)]},
        "touching intervals": {0: [(0.0, 0.5), (0.5, 1.0)], 1: [(0.25, 0.5), (0.5, 1.25)]},
        "overlapping intervals": {
            0: [(0.0, 0.6), (0.5, 1.0)],
            1: [(0.2, 0.7), (0.6, 0.9), (0.85, 1.0)],
        },
        "an interval inside another": {
            0: [(0.0, 1.0), (0.25, 0.5)],
            1: [(0.5, 1.5)],
            2: [(1.0, 2.0)],
        },
        "ranks 2, 5 and 7 (a pipeline's global ranks, not 0..n-1), from t = 10 s": {
            5: [(10.25, 10.75), (11.0, 11.25)],
            2: [(10.0, 10.5), (11.0, 11.5)],
            7: [(10.5, 11.0)],
        },
    }


def _overlap_case() -> dict[int, list[tuple[float, float]]]:
    """Recorded timestamps may overlap slightly (a backward stamped before the previous
    forward's end): 3 ranks, a few microseconds of overlap."""
    return {
        0: [(0.0, 0.010), (0.009995, 0.020), (0.030, 0.040)],
        1: [(0.011, 0.021), (0.020990, 0.031)],
        2: [(0.022, 0.030), (0.0299, 0.041)],
    }


#: Timelines the statement says must raise ValueError (hidden check), with why.
_MEASURED_INVALID = [
    ({}, "no rank"),
    ({0: [(0.0, 1.0)], 1: []}, "a rank without intervals"),
    ({0: [(0.5, 0.5)], 1: [(0.5, 0.5)]}, "a span that is not positive (every interval empty)"),
]


def _check_measured(measured_bubble, cases: dict, invalid: list | None = None) -> None:
    ref = reference(ASSIGNMENT).measured_bubble
    names = list(cases)
    invalid = invalid or []
    calls = [((cases[n],), {}) for n in names] + [((tl,), {}) for tl, _ in invalid]
    answers = Recorded("measured_bubble", calls, measured_bubble.probe(attempt_all, calls))
    for name in names:
        tl = cases[name]
        try:
            got = call_student(answers, tl, name="measured_bubble")
        except CheckFailed as exc:
            if sorted(tl) != list(range(len(tl))):
                raise CheckFailed(
                    f"{exc}\n  Likely cause: the ranks here are {sorted(tl)}, not 0..n-1 (the "
                    "keys are the pipeline's global ranks): iterate over timelines.values() or "
                    "timelines.items(), not range(len(timelines))"
                ) from exc.__cause__
            raise
        want = ref(tl)
        if _is_number(got) and abs(got - want) <= 1e-12 + 1e-9 * abs(want):
            continue
        shown = {r: iv if len(iv) <= 4 else f"{len(iv)} intervals" for r, iv in tl.items()}
        what = f"measured_bubble on {name}: {shown}"
        if not _is_number(got):
            fail(what, yours=got, expected=want, cause="return a float (the idle share, 0 to 1)")
        cause = next(
            (
                text
                for mistake, text in _MEASURED_MISTAKES
                if abs(mistake(tl) - got) <= 1e-9 * max(1.0, abs(got))
            ),
            "1 - (sum over ranks of the union of that rank's intervals) / (number of ranks x "
            "(last end on any rank - first start on any rank))",
        )
        fail(what, yours=got, expected=want, cause=cause)
    for tl, why in invalid:
        expect_raises(
            ValueError,
            answers,
            tl,
            what=f"measured_bubble({tl}): {why}",
            cause="raise ValueError with a clear message when there is no rank, a rank has no "
            "interval, or the span (last end - first start) is not positive",
        )


def _measured_cases() -> dict:
    rec = recorded_timelines()
    cases = {f"the recorded run {n}": tl for n, tl in rec.items() if "_p2_" in n}
    for sched in ("gpipe", "1f1b"):
        for p, m in ((2, 4), (4, 8)):
            cases[f"an ideal {sched} schedule, p={p}, m={m}, t_b = 2 t_f"] = schedule_timeline(
                p, m, 0.001, 0.002, sched
            )
    cases["overlapping intervals (3 ranks)"] = _overlap_case()
    shifted = schedule_timeline(2, 4, 0.001, 0.002, "1f1b")
    cases["an ideal 1f1b schedule, p=2, m=4, its clock starting at 2.5 s"] = {
        rank: [(start + 2.5, end + 2.5) for start, end in ivs] for rank, ivs in shifted.items()
    }
    # times relative to a mark taken mid-run (perf_counter() - t0): negative before it
    early = schedule_timeline(2, 4, 0.001, 0.002, "1f1b")
    cases["an ideal 1f1b schedule, p=2, m=4, its clock starting at -0.005 s"] = {
        rank: [(start - 0.005, end - 0.005) for start, end in ivs] for rank, ivs in early.items()
    }
    cases["two intervals inside a third"] = {
        0: [(0.0, 1.0), (0.2, 0.4), (0.6, 0.8)],
        1: [(0.5, 1.5)],
    }
    return cases


def _measured_cases_hidden() -> dict:
    rec = recorded_timelines()
    cases = {f"the recorded run {n}": tl for n, tl in rec.items() if "_p2_" not in n}
    cases.update(_edge_cases())
    cases["an ideal 1f1b schedule, p=3, m=5"] = schedule_timeline(3, 5, 0.003, 0.005, "1f1b")
    cases["an ideal gpipe schedule, p=8, m=2"] = schedule_timeline(8, 2, 0.002, 0.002, "gpipe")
    return cases


def check_measured_bubble(measured_bubble) -> None:
    """Compare with the bubble fraction of timelines recorded from real 2-rank pipelining runs,
    of ideal GPipe and 1F1B schedules (where it equals (p-1)/(m+p-1)), two of them on clocks
    that start at 2.5 s and at -0.005 s, of a timeline whose intervals overlap slightly and of
    one with two intervals inside a third.

    Raises:
        CheckFailed: a value differs (the message names the mistake it matches).
    """
    measured_bubble = student(measured_bubble, "measured_bubble")
    _check_measured(measured_bubble, _measured_cases())
    passed("measured_bubble matches recorded and ideal schedules")


def check_measured_bubble_hidden(measured_bubble) -> None:
    """4-rank recordings and edge cases: unsorted, touching, overlapping and nested intervals
    a rank with one interval, ranks numbered 2, 5 and 7 (not 0..n-1); ValueError for no rank, a
    rank without intervals and a span that is not positive."""
    measured_bubble = student(measured_bubble, "measured_bubble")
    _check_measured(measured_bubble, _measured_cases_hidden(), _MEASURED_INVALID)
    passed("measured_bubble handles 4-rank runs, unsorted, touching and overlapping intervals")
