"""12_triton Exercise 5 (FlashAttention's backward): the checks accept the reference and the
answers written differently (atomics for dq, D inside the kernels, exp2, ``triton_op``) and
reject every listed mistake with a message naming it (lse not stored, D left out, the scale
left out, a race on dq, P in a scratch tensor, dq with torch, the forward run again in the
backward, torch's autograd in the backward); the byte bounds are computed here independently
from the shapes and the reference's blocks; the tolerances leave a margin over the reference's
float32 error and every mistake falls outside them on the visible cases. Each sample's score is
checked by test_12_triton.py's ``test_sample_scores_as_declared`` (it covers every sample of
12_triton)."""

from __future__ import annotations

import functools
import inspect
import linecache
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from grader.checks import ch12_triton as checks
from grader.checks.ch12_triton import backward
from grader.checks.common import CheckFailed
from grader.runtime import course, triton_cpu
from grader.tools import samples

from .helpers import exercise_params, reference_fn, run_every_check

A = "12_triton"
NAMES = ["attention_forward_lse", "attention_backward", "flash_attention"]
F32 = 4
#: The reference's blocks (solutions/12_triton, cell attention_backward).
BLOCK_M = BLOCK_N = 32
CELLS = ("attention_backward", "flash_attention")


@functools.cache
def _namespace(answer: str) -> dict:
    """The two cells of Exercise 5 run in one namespace: the sample's where it has them, the
    reference's (without the solution markers) otherwise."""
    nb = course.read(course.source_path(A))
    ref = {
        course.nbgrader_meta(c)["grade_id"]: course.strip_solution_markers(c.source)
        for c in course.solution_cells(nb)
    }
    overrides = {}
    if answer != "reference":
        (sample,) = [s for s in samples.load_samples(A) if s.name == answer]
        overrides = sample.cells
    namespace: dict = {"__name__": "__main__"}
    for cell in CELLS:
        code = overrides.get(cell) or ref[cell]
        filename = f"<{answer}:{cell}>"
        # in the line cache, as IPython keeps a cell: @triton.jit reads its function's source
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - the course's own code
    return namespace


def _answer(answer: str, name: str):
    return _namespace(answer)[name]


@pytest.mark.parametrize(
    "name, signature",
    [
        ("attention_forward_lse", "(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple"),
        (
            "attention_backward",
            "(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, "
            "lse: torch.Tensor, do: torch.Tensor) -> tuple",
        ),
        (
            "flash_attention",
            "(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor",
        ),
    ],
)
def test_reference_has_the_documented_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize("name", exercise_params(A, NAMES))
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


@pytest.mark.parametrize(
    "answer",
    ["correct_backward_atomic_dq", "correct_backward_d_in_kernels", "correct_backward_exp2"],
)
def test_correct_answers_pass_the_visible_checks(answer, capsys):
    """The visible checks alone (test_12_triton.py grades the samples with the hidden ones)."""
    checks.check_attention_forward_lse(_answer(answer, "attention_forward_lse"))
    checks.check_attention_backward(_answer(answer, "attention_backward"))
    assert capsys.readouterr().out.count("OK:") == 2


def _counted(fn, *args):
    with triton_cpu.count_traffic() as log:
        out = fn(*args)
    return out, log.total()


def test_reference_backward_moves_the_bytes_computed_from_its_blocks():
    """L = 37, S = 70, d = 16 with the reference's 32 x 32 blocks: a preprocess of
    cdiv(37, 32) = 2 programs, a key-block kernel of cdiv(70, 32) = 3, a dq kernel of 2. Each
    key-block program reads all of q, do, lse and D; each dq program all of k and v."""
    length, s, d = 37, 70, 16
    spec = backward.backward_case(length, s, d, 0)
    q, k, v, do = backward.make_backward_inputs(spec)
    o, lse = backward._given_o_lse(spec, q, k, v)
    (dq, dk, dv), total = _counted(reference_fn(A, "attention_backward"), q, k, v, o, lse, do)
    pre = query_blocks = math.ceil(length / 32)
    key_blocks = math.ceil(s / 32)
    assert [g for _, g in total.launches] == [(pre, 1, 1), (key_blocks, 1, 1), (query_blocks, 1, 1)]
    ld, sd = length * d * F32, s * d * F32
    per = total.per_tensor
    assert per["dq_ptr"].stored_bytes == ld and per["dk_ptr"].stored_bytes == sd
    assert per["dv_ptr"].stored_bytes == sd
    assert per["delta_ptr"].stored_bytes == length * F32  # D: stored by the preprocess
    assert total.stores_bytes == ld + 2 * sd + length * F32
    assert per["q_ptr"].loaded_bytes == key_blocks * ld + ld  # every key block, then the dq kernel
    assert per["k_ptr"].loaded_bytes == sd + query_blocks * sd
    assert per["o_ptr"].loaded_bytes == ld  # the preprocess only
    assert per["lse_ptr"].loaded_bytes == (key_blocks + 1) * length * F32
    programs = pre + key_blocks + query_blocks
    bounds = checks.backward_bounds(length, s, d, programs)
    assert bounds["dq"] == 2368 and bounds["dk"] == bounds["dv"] == 4480
    assert bounds["scratch"] == 148
    assert bounds["load_q"] == programs * ld >= per["q_ptr"].loaded_bytes
    assert bounds["load_k"] == programs * sd >= per["k_ptr"].loaded_bytes
    assert bounds["load_lse"] == programs * length * F32 >= per["lse_ptr"].loaded_bytes
    want = backward.expected_gradients(spec)
    for got, w in zip((dq, dk, dv), want):
        torch.testing.assert_close(got.double(), w, rtol=1e-4, atol=1e-5)


def test_reference_forward_stores_exactly_o_and_lse():
    length, s, d = 48, 80, 32
    q, k, v, _ = backward.make_backward_inputs(backward.backward_case(length, s, d, 1))
    (o, lse), total = _counted(reference_fn(A, "attention_forward_lse"), q, k, v)
    programs = math.ceil(length / 32)
    assert total.launches == [("attention_lse_kernel", (programs, 1, 1))]
    assert total.stores_bytes == length * d * F32 + length * F32
    bounds = checks.forward_lse_bounds(length, s, d, programs)
    assert bounds == {
        "q": length * d * F32,
        "k": programs * s * d * F32,
        "v": programs * s * d * F32,
        "o": length * d * F32,
        "lse": length * F32,
    }
    assert total.per_tensor["k_ptr"].loaded_bytes == bounds["k"]
    torch.testing.assert_close(lse, torch.logsumexp(q @ k.T / math.sqrt(d), dim=1))
    torch.testing.assert_close(o, F.scaled_dot_product_attention(q[None], k[None], v[None])[0])


def test_atomic_dq_is_counted_apart_from_plain_stores():
    """correct_backward_atomic_dq adds into dq with tl.atomic_add once per key block (16 keys):
    its plain stores into dq are 0 and its atomics cdiv(S, 16) * L * d * 4 bytes."""
    spec = backward.backward_case(37, 70, 16, 0)
    (seen,) = backward._probe_backward(
        _answer("correct_backward_atomic_dq", "attention_backward"), [spec]
    )["cases"]
    dq = seen["traffic"]["roles"]["dq"]
    assert seen["atomic"] == {"dq": math.ceil(70 / 16) * 37 * 16 * F32}
    assert dq["stored"] == seen["atomic"]["dq"]  # count_traffic counts an atomic as a store
    assert dq["distinct_stored"] == 37 * 16 * F32
    assert seen["races"] == []
    from triton.runtime import interpreter

    assert "create_atomic_rmw" not in interpreter.interpreter_builder.__dict__  # restored


@pytest.mark.parametrize(
    "sample, name, message",
    [
        ("wrong_backward_recomputes_lse", "attention_forward_lse", "did not store lse"),
        ("wrong_backward_recomputes_lse", "attention_backward", "lse not read"),
        ("wrong_backward_recomputes_lse", "flash_attention", "was not written by its kernel"),
        ("wrong_backward_no_delta", "attention_backward", "D left out"),
        ("wrong_backward_no_delta", "flash_attention", "D left out"),
        ("wrong_backward_no_scale", "attention_backward", "scale left out"),
        ("wrong_backward_dq_race", "attention_backward", "race on memory"),
        ("wrong_backward_dq_race", "flash_attention", "race on memory"),
        ("wrong_backward_scratch_probabilities", "attention_backward", "materialized"),
        ("wrong_backward_dq_with_torch", "attention_backward", "computed with torch"),
        ("wrong_backward_flash_forward_again", "flash_attention", "save_for_backward"),
        ("wrong_backward_flash_torch_autograd", "flash_attention", "L x S"),
    ],
)
def test_each_mistake_is_named_in_the_message(sample, name, message):
    fn = _answer(sample, name)
    with pytest.raises(CheckFailed) as info:
        getattr(checks, f"check_{name}")(fn)
    text = str(info.value)
    assert message in text, text
    assert "Yours" in text and "Expected" in text and "Likely cause" in text


def test_probabilities_stored_into_a_buffer_made_outside_are_caught_by_the_stores():
    """The scratch-probabilities sample's kernels, with the (L, S) buffer allocated outside the
    function (no torch operation inside the call makes it): the stores give it away."""
    ns = _namespace("wrong_backward_scratch_probabilities")
    scratch = torch.empty(150 * 150)

    def attention_backward(q, k, v, o, lse, do):
        length, d = q.shape
        s = k.shape[0]
        scale = 1.0 / math.sqrt(d)
        dq, dk, dv = torch.empty(length, d), torch.empty(s, d), torch.empty(s, d)
        delta = torch.empty(length)
        ns["attention_delta_kernel"][(math.ceil(length / 32),)](
            o, do, delta, length, o.stride(0), do.stride(0), D=d, BLOCK_M=32
        )
        ns["attention_dkdv_kernel"][(math.ceil(s / 32),)](
            q, k, v, do, lse, delta, scratch, dk, dv, length, s, q.stride(0), k.stride(0),
            v.stride(0), do.stride(0), dk.stride(0), dv.stride(0), scale, D=d, BLOCK_M=32,
            BLOCK_N=32,
        )  # fmt: skip
        ns["attention_dq_kernel"][(math.ceil(length / 32),)](
            q, k, v, do, lse, delta, scratch, dq, length, s, q.stride(0), k.stride(0),
            v.stride(0), do.stride(0), dq.stride(0), scale, D=d, BLOCK_M=32, BLOCK_N=32,
        )  # fmt: skip
        return dq, dk, dv

    with pytest.raises(CheckFailed, match="into tensors other than dq, dk") as info:
        checks.check_attention_backward(attention_backward)
    assert "D: one float per query" in str(info.value)


def test_a_copy_of_an_input_is_named():
    """q.contiguous() on a strided q: the kernels read a copy (``other``), not q."""
    reference = reference_fn(A, "attention_backward")

    def attention_backward(q, k, v, o, lse, do):
        return reference(q.contiguous(), k, v, o, lse, do)

    spec = backward.BACKWARD_CASES[1]
    assert spec[4][0]  # q's rows are strided in this case
    (seen,) = backward._probe_backward(attention_backward, [spec])["cases"]
    with pytest.raises(CheckFailed, match="read 0 of q's"):
        backward._judge_backward(spec, seen)


@pytest.mark.parametrize("which", ["visible", "hidden"])
def test_the_reference_is_well_inside_the_tolerances(which):
    """The reference's worst error is under a quarter of each tolerance (the module's comments
    give the figures over 200 more drawn cases)."""
    ref = course.reference(A)
    specs = backward.BACKWARD_CASES if which == "visible" else backward.BACKWARD_HIDDEN
    (o_rtol, o_atol), (l_rtol, l_atol) = backward.O_TOL, backward.LSE_TOL
    for spec in specs:
        q, k, v, do = backward.make_backward_inputs(spec)
        (o, lse), _ = _counted(ref.attention_forward_lse, q, k, v)
        o64, lse64 = backward.exact_forward(q, k, v)
        assert ((o.double() - o64).abs() / (o_atol + o_rtol * o64.abs())).max() < 0.25
        assert ((lse.double() - lse64).abs() / (l_atol + l_rtol * lse64.abs())).max() < 0.25
        given = backward._given_o_lse(spec, q, k, v)
        grads, _ = _counted(ref.attention_backward, q, k, v, *given, do)
        want = backward.expected_gradients(spec)
        scale_g = max(w.abs().max().item() for w in want)
        tol = backward.GRAD_TOL
        for g, w in zip(grads, want):
            ratio = (g.double() - w).abs() / (tol["atol"] * scale_g + tol["rtol"] * w.abs())
            assert ratio.max() < 0.25, spec


def test_every_named_mistake_is_outside_the_tolerance_on_a_visible_case():
    """Each variant of :func:`backward._mistakes` (float64, no kernel) fails the gradient
    tolerance on at least one visible case, so the check can catch it."""
    tol = backward.GRAD_TOL
    caught: dict[str, bool] = {}
    for spec in backward.BACKWARD_CASES:
        want = dict(zip(backward.GRADS, backward.expected_gradients(spec)))
        scale_g = max(w.abs().max().item() for w in want.values())
        for cause, grads in backward._mistakes(spec):
            off = any(
                not torch.allclose(grads[n], want[n], rtol=tol["rtol"], atol=tol["atol"] * scale_g)
                for n in backward.GRADS
            )
            caught[cause] = caught.get(cause, False) or off
    assert caught and all(caught.values()), [c for c, ok in caught.items() if not ok]


def test_the_visible_cases_cover_the_domain():
    specs = backward.BACKWARD_CASES
    assert {s[2] for s in specs} == {16, 32, 64}
    assert any(s[0] == 1 for s in specs) and any(s[1] == 1 for s in specs)
    assert any(s[0] % 16 and s[1] % 16 for s in specs)  # not multiples of any block of 16+
    pads = next(s[4] for s in specs if any(s[4]))
    assert len({p for p in pads if p}) >= 4  # q, k, v, o and do strided differently
    assert any(s[5] >= 30 for s in specs) and any(s[6] for s in specs)


def test_the_hidden_draws_are_seeded_and_cover_the_domain():
    assert backward.draw_backward_cases(2025, 6) == backward.BACKWARD_HIDDEN
    many = backward.draw_backward_cases(7, 300)
    assert {s[2] for s in many} == {16, 32, 64}
    assert min(s[0] for s in many) == 1 and min(s[1] for s in many) == 1
    assert max(s[0] for s in many) >= 145 and any(s[6] for s in many)
    assert {p for s in many for p in s[4]} == {0, 1, 5, 16} and {s[5] for s in many} == {1, 4, 30}


@given(
    length=st.integers(1, 40),
    s=st.integers(1, 40),
    d=st.sampled_from([16, 32, 64]),
    pads=st.tuples(*[st.sampled_from([0, 1, 5, 16])] * 5),
    negative=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_inputs_have_the_case_layout_and_very_negative_rows(length, s, d, pads, negative, seed):
    negative = min(negative, length)
    spec = backward.backward_case(length, s, d, seed, pads, 1.0, negative)
    q, k, v, do = backward.make_backward_inputs(spec)
    for t, rows, pad in zip(
        (q, k, v, do), (length, s, s, length), (pads[0], pads[1], pads[2], pads[4])
    ):
        assert t.shape == (rows, d) and t.stride() == (d + pad, 1) and t.dtype == torch.float32
    o, lse = backward._given_o_lse(spec, q, k, v)
    assert o.stride() == (d + pads[3], 1) and lse.shape == (length,)
    assert backward.make_backward_inputs(spec)[0].equal(q)  # seeded
    if negative:
        scores = q[:negative].double() @ k.double().T / math.sqrt(d)
        assert scores.max() < -104  # exp(score) underflows to 0 in float32
        assert torch.isfinite(lse[:negative]).all() and (lse[:negative] < -100).all()


def test_race_records_of_the_runtime_are_read():
    """_race_lines reads count_traffic's per-launch Race records (triton_cpu.Traffic.races), each
    in words."""
    race = triton_cpu.Race("k", "dq_ptr", "write-write", 3, ((0, 0, 0), (1, 0, 0), 5))
    one = triton_cpu.Traffic(races=[race])
    assert backward._race_lines([one, triton_cpu.Traffic()]) == [race.describe()]
    assert "element 5 of `dq_ptr`" in race.describe()


def test_the_dq_race_is_reported_by_the_runtime_and_the_correct_dq_patterns_are_not():
    """The load-add-store of dq is a write-write race of the key-block kernel on dq; atomics,
    the reference's dq kernel and D inside the kernels are race-free."""
    spec = backward.backward_case(37, 70, 16, 0)
    (racy,) = backward._probe_backward(
        _answer("wrong_backward_dq_race", "attention_backward"), [spec]
    )["cases"]
    assert racy["races"] and all("dq_ptr" in line for line in racy["races"])
    assert "both stored" in racy["races"][0]
    for answer in ("reference", "correct_backward_atomic_dq", "correct_backward_d_in_kernels"):
        (one,) = backward._probe_backward(_answer(answer, "attention_backward"), [spec])["cases"]
        assert one["races"] == [], answer


def test_the_cuda_check_runs_its_probe_and_verdict_on_a_small_cpu_case(monkeypatch, capsys):
    """The _cuda check's code path (probe, timing beside SDPA's backward, values at the handed
    back rows, verdict) on a CPU case under the interpreter, the time band lifted (the
    interpreter is orders of magnitude slower than SDPA); D left out fails it."""
    monkeypatch.setattr(backward, "BACKWARD_MAX_TIME_RATIO", math.inf)
    spec = backward.backward_case(40, 24, 16, 3)
    # count_traffic runs every launch under the interpreter, kernels decorated before too
    with triton_cpu.count_traffic():
        backward._check_backward_on(_answer("reference", "attention_backward"), spec, "cpu")
        assert "x the time of SDPA's backward (cpu)" in capsys.readouterr().out
        with pytest.raises(CheckFailed, match="wrong dq"):
            fn = _answer("wrong_backward_no_delta", "attention_backward")
            backward._check_backward_on(fn, spec, "cpu")
