"""Checks for 12_triton, Exercise 5: FlashAttention's backward (``attention_forward_lse``,
``attention_backward``, ``flash_attention``), as in FlashAttention-2 (Dao 2023, Algorithm 2).

The probes work as :mod:`.kernels`' do, and reuse its helpers: the student's function runs on
CPU tensors inside :func:`grader.runtime.triton_cpu.count_traffic` (every launch under Triton's
interpreter, every access counted and attributed by address to a named tensor: the inputs, the
returned tensors, or ``"other"``), inside a :class:`.kernels._TensorsMade` that records the
floating-point tensors of ``L*S`` elements or more that torch operations create, and everything
comes back as plain data. The checks judge in the grading process:

* ``attention_forward_lse(q, k, v) -> (o, lse)``: one launch; o and lse against float64;
  stores exactly ``o`` and ``lse`` (:func:`forward_lse_bounds`); q, k, v read whole, k and v at
  most once per program instance (:func:`.kernels.attention_bounds`); no ``L x S`` tensor.
* ``attention_backward(q, k, v, o, lse, do) -> (dq, dk, dv)``, given ``o`` and ``lse`` computed
  exactly by the checks (float64, rounded to float32): dq, dk, dv against the gradients of
  ``F.scaled_dot_product_attention`` on float64 copies (:data:`GRAD_TOL`), with the likely
  mistake named when the answer matches one (:func:`_mistakes`: D left out, the scale left out);
  no ``L x S`` tensor made by torch; no **race** (``count_traffic``'s
  :attr:`~grader.runtime.triton_cpu.Traffic.races`, read by :func:`_race_lines`: an element
  stored by two program instances of one launch with plain stores, or loaded by one and stored
  by another; atomics excepted); each gradient written by the kernels, never loaded by plain loads, never
  changed afterwards; stores (:func:`backward_bounds`): each gradient exactly once with
  ``tl.store`` (dq may instead be accumulated with ``tl.atomic_add``), plus at most ``L*4`` bytes
  into one other tensor (``D``); q, k, v, o, do and lse read whole from the tensors given, each
  at most once per program instance, and nothing else read but ``D``.
* ``flash_attention(q, k, v)``: differentiable (its output has a ``grad_fn``); the forward
  stores o and an ``(L,)`` float32 lse, saved for the backward (``ctx.save_for_backward``) and
  read by the backward's kernels; the gradients ``torch.autograd.grad`` gives, judged as
  ``attention_backward``'s.

The visible checks also compile every kernel their cases launched for sm_90 and sm_80
(:func:`.kernels._compile`, judged by :func:`.kernels._judge_compiled`), as Exercises 1-4's do:
a kernel the compiler rejects fails; the pass message gives the compiler's figures.

Atomics: :func:`count_traffic` counts an atomic lane as a load and a store of its tensor; the
probes also count the atomic lanes per tensor (:class:`_AtomicLanes`) so that plain stores and
atomics can be told apart.

The ``_cuda`` check runs ``attention_backward`` at ``L = S = 4096``, ``d = 64`` on a GPU: values
against float64 SDPA gradients (TF32 tolerances) and time against SDPA's backward.
"""

from __future__ import annotations

import contextlib
import math
import random
import warnings

import numpy as np
import torch
import torch.nn.functional as F

from grader.checks.ch12_triton.kernels import (
    CUDA_ROWS,
    MASK_CAUSE,
    UNDEFINED_LANES_CAUSE,
    _autotune_without_timing,
    _bytes,
    _changed_after_kernels,
    _compiled,
    _for_compiling,
    _inputs_changed,
    _judge_compiled,
    _role,
    _span,
    _TensorsMade,
    _traffic_data,
    attention_bounds,
)
from grader.checks.common import (
    call_student,
    cuda_or_not_checked,
    fail,
    passed,
    require,
)
from grader.runtime import triton_compile, triton_cpu
from grader.runtime.remote import attempt, outcome, student

__all__ = [
    "BACKWARD_CASES",
    "BACKWARD_CUDA_SPEC",
    "BACKWARD_CUDA_TOL",
    "BACKWARD_HIDDEN",
    "BACKWARD_MAX_TIME_RATIO",
    "FLASH_CASES",
    "FLASH_HIDDEN",
    "GRAD_TOL",
    "LSE_TOL",
    "O_TOL",
    "backward_bounds",
    "backward_case",
    "check_attention_backward",
    "check_attention_backward_cuda",
    "check_attention_backward_hidden",
    "check_attention_forward_lse",
    "check_attention_forward_lse_hidden",
    "check_flash_attention",
    "check_flash_attention_hidden",
    "draw_backward_cases",
    "exact_forward",
    "expected_gradients",
    "forward_lse_bounds",
    "make_backward_inputs",
]

ASSIGNMENT = "12_triton"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True

F32 = 4
GRADS = ("dq", "dk", "dv")
INPUTS = ("q", "k", "v", "o", "lse", "do")


# --------------------------------------------------------------------------- cases
def backward_case(
    length: int,
    s: int,
    d: int,
    seed: int,
    pads: tuple = (0, 0, 0, 0, 0),
    q_scale: float = 1.0,
    negative: int = 0,
) -> tuple:
    """One case as plain data: ``(L, S, d, seed, pads, q_scale, negative)``.

    Args:
        length, s, d: L queries, S keys, head dimension d.
        seed: the seed of the case's draws.
        pads: extra columns of q, k, v, o and do: each is the first ``d`` columns of a tensor
            that many columns wider (rows strided, last dimension contiguous), 0 for contiguous.
        q_scale: q multiplied by it (30: scores in the hundreds, where exp overflows float32).
        negative: that many first rows of q are ``-125 / sqrt(d) + randn`` and every key
            ``2 + randn``: their scores are about -250 (every one below -110 over 1200 draws),
            where ``exp(score)`` underflows to 0 (below about -104 in float32).
    """
    return (length, s, d, seed, tuple(pads), float(q_scale), negative)


#: Visible cases: L and S not multiples of any block, one query, one key, d = 16, 32 and 64,
#: rows strided with a different row stride for each of q, k, v, o and do, scores in the
#: hundreds, rows whose scores are all very negative. L*S is larger than any tensor the
#: functions need where it matters (see ``_made_threshold``).
BACKWARD_CASES = [
    backward_case(37, 70, 16, 1),
    backward_case(33, 50, 32, 2, pads=(16, 8, 3, 24, 40)),
    backward_case(1, 50, 16, 3),
    backward_case(40, 1, 16, 4),
    backward_case(45, 70, 64, 5, q_scale=30.0),
    backward_case(30, 41, 16, 6, negative=5),
]


def draw_backward_cases(seed: int, count: int) -> list[tuple]:
    """``count`` cases drawn (seeded) from the whole domain the statement allows: L and S from
    1 to 150, d in {16, 32, 64}, each input's rows strided or not (pads 0, 1, 5 or 16), q
    scaled by 1, 4 or 30, sometimes rows whose scores are all very negative."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        length = rng.choice([1, rng.randint(2, 150)])
        s = rng.choice([1, rng.randint(2, 150)]) if i % 3 == 0 else rng.randint(2, 150)
        d = rng.choice([16, 32, 64])
        pads = tuple(rng.choice([0, 0, 1, 5, 16]) for _ in range(5))
        q_scale = rng.choice([1.0, 1.0, 4.0, 30.0])
        negative = rng.choice([0, 0, min(length, 3)])
        out.append(backward_case(length, s, d, 100 + seed + i, pads, q_scale, negative))
    return out


#: Hidden cases: seeded draws (the same ones at every grading).
BACKWARD_HIDDEN = draw_backward_cases(2025, 6)
#: The end-to-end cases of flash_attention (the forward and autograd's backward).
FLASH_CASES = [
    backward_case(37, 70, 16, 11, pads=(5, 0, 16, 0, 3)),
    backward_case(1, 20, 32, 12),
    backward_case(45, 33, 64, 13, q_scale=30.0, negative=3),
]
FLASH_HIDDEN = draw_backward_cases(4049, 3)


def _wide(rows: int, d: int, pad: int, g: torch.Generator) -> torch.Tensor:
    return torch.randn(rows, d + pad, generator=g, dtype=torch.float64)


def make_backward_inputs(spec: tuple, device: str = "cpu", requires_grad: bool = False) -> tuple:
    """The case's ``q (L, d)``, ``k``, ``v (S, d)`` and ``do (L, d)``, float32, the same wherever
    they are made (seeded, drawn in float64 on the CPU).

    Args:
        spec: a :func:`backward_case`.
        device: where to put them.
        requires_grad: make each underlying (wide) tensor a leaf that requires grad; the
            returned q, k, v are then views of them (when padded) that autograd can
            differentiate with respect to.
    """
    length, s, d, seed, pads, q_scale, negative = spec
    g = torch.Generator().manual_seed(seed)
    own = (pads[0], pads[1], pads[2], pads[4])  # o's pad is the checks' (_given_o_lse)
    wide = [_wide(r, d, p, g) for r, p in zip((length, s, s, length), own)]
    wide[0] *= q_scale
    if negative:
        low = torch.randn(negative, d + pads[0], generator=g, dtype=torch.float64)
        wide[0][:negative] = -125.0 / math.sqrt(d) + low
        wide[1] += 2.0
    out = []
    for t, p, grad in zip(wide, own, (True, True, True, False)):
        t = t.float().to(device)
        if requires_grad and grad:
            t.requires_grad_()
        out.append(t[:, :d] if p else t)
    return tuple(out)


def exact_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
    """``(o, lse)`` in float64 from the float32 inputs: ``o = softmax(q k^T / sqrt(d)) v``,
    ``lse_i = log sum_j exp(q_i . k_j / sqrt(d))`` (natural log)."""
    q64, k64, v64 = (t.detach().double() for t in (q, k, v))
    scores = q64 @ k64.T / math.sqrt(q.shape[1])
    lse = torch.logsumexp(scores, dim=1)
    return torch.softmax(scores, dim=1) @ v64, lse


def _given_o_lse(spec: tuple, q, k, v, device: str = "cpu") -> tuple:
    """The o (strided by its pad) and lse the checks hand to attention_backward: exact, rounded
    to float32."""
    length, _, d, seed, pads = spec[:5]
    o64, lse64 = exact_forward(q, k, v)
    if pads[3]:
        g = torch.Generator().manual_seed(seed + 7)
        wide = torch.randn(length, d + pads[3], generator=g).to(device)
        wide[:, :d] = o64.float()
        o = wide[:, :d]
    else:
        o = o64.float().contiguous()
    return o, lse64.float().contiguous()


def expected_gradients(spec: tuple, device: str = "cpu") -> tuple:
    """``(dq, dk, dv)``: the gradients of ``F.scaled_dot_product_attention`` on float64 copies
    of the case's inputs, with the case's ``do`` (autograd)."""
    q, k, v, do = make_backward_inputs(spec, device=device)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*(t[None] for t in leaves))[0]
    return tuple(torch.autograd.grad(out, leaves, do.double()))


# --------------------------------------------------------------------------- probe side
class _AtomicLanes:
    """While active (inside ``count_traffic``): the addresses of every active lane of every
    ``tl.atomic_*`` (and their element size), to be attributed to tensors afterwards."""

    def __init__(self) -> None:
        self.calls: list = []
        self._saved: dict = {}

    def __enter__(self):
        import numpy as np
        from triton.runtime import interpreter as interp

        builder = interp.interpreter_builder
        inner_rmw, inner_cas = builder.create_atomic_rmw, builder.create_atomic_cas
        self._saved = {
            n: builder.__dict__[n]
            for n in ("create_atomic_rmw", "create_atomic_cas")
            if n in builder.__dict__
        }

        def record(ptr, mask):
            addresses = np.asarray(ptr.data).astype(np.uint64, copy=False)
            active = (
                np.ones(addresses.shape, bool)
                if mask is None
                else np.broadcast_to(np.asarray(mask.data, bool), addresses.shape)
            )
            size = max(1, ptr.get_element_ty().primitive_bitwidth // 8)
            self.calls.append((addresses[active].copy(), size))

        def rmw(rmw_op, ptr, val, mask, sem, scope):
            record(ptr, mask)
            return inner_rmw(rmw_op, ptr, val, mask, sem, scope)

        def cas(ptr, cmp, val, sem, scope):
            record(ptr, None)
            return inner_cas(ptr, cmp, val, sem, scope)

        builder.create_atomic_rmw, builder.create_atomic_cas = rmw, cas
        return self

    def __exit__(self, *exc):
        from triton.runtime import interpreter as interp

        builder = interp.interpreter_builder
        for name in ("create_atomic_rmw", "create_atomic_cas"):
            builder.__dict__.pop(name, None)
        builder.__dict__.update(self._saved)
        return False

    def per_role(self, roles: dict[str, tuple[int, int]]) -> dict[str, int]:
        """Bytes of atomic lanes per role (the first role whose extent holds the lane)."""
        import numpy as np

        out: dict[str, int] = {}
        for addresses, size in self.calls:
            left = np.ones(addresses.shape, bool)
            for role, (lo, hi) in roles.items():
                inside = (addresses >= np.uint64(lo)) & (
                    addresses + np.uint64(size) <= np.uint64(hi)
                )
                inside &= left
                if inside.any():
                    out[role] = out.get(role, 0) + int(inside.sum()) * size
                    left &= ~inside
        return out


def _race_lines(log) -> list[str]:
    """The races ``count_traffic`` recorded in the launches (:attr:`.triton_cpu.Traffic.races`:
    an element stored by two program instances of one launch with plain stores, or loaded by one
    and stored by another; atomics excepted), in words, at most 5."""
    lines: list[str] = []
    for traffic in log:
        for record in getattr(traffic, "races", None) or []:
            describe = getattr(record, "describe", None)
            lines.append(describe() if callable(describe) else str(record))
    return lines[:5]


def _made_threshold(length: int, s: int, d: int) -> int | None:
    """Record torch-made tensors of ``L*S`` elements or more, where that is larger than every
    tensor the functions need (q, k, v, o, do and the gradients); else None."""
    return length * s if length * s > max(length, s) * d else None


def _counted(fn, inputs: dict, outputs: tuple, spec: tuple, extra=None, keep=None) -> dict:
    """Run ``fn(*inputs)`` under ``count_traffic``, a ``_TensorsMade`` and the atomic lanes;
    plain data back: the call, the traffic per role (inputs, the returned ``outputs``, the
    tensors ``extra(returned)`` names, ``"other"``), atomics per role, races, and what was
    changed outside the kernels. ``keep`` (a dict) receives the returned value and the extra
    tensors, for a probe that goes on with them."""
    length, s, d = spec[:3]
    roles = {name: _span(t) for name, t in inputs.items()}
    originals = {name: _bytes(lo, hi) for name, (lo, hi) in roles.items()}
    threshold = _made_threshold(length, s, d)
    made = _TensorsMade(threshold) if threshold else None
    atomics = _AtomicLanes()
    seen: dict = {}
    box: dict = {}

    def run():
        # overflow in lanes a kernel masks afterwards (exp of a padded score) is harmless, and
        # numpy's warning would go to stderr, which plain nbgrader scores as a failed cell
        with (
            warnings.catch_warnings(),
            np.errstate(all="ignore"),
            _autotune_without_timing(seen),
            triton_compile.record_launches() as launches,
            triton_cpu.count_traffic() as log,
            atomics,
            made if made is not None else contextlib.nullcontext(),
        ):
            warnings.simplefilter("ignore", RuntimeWarning)
            box["log"] = log
            box["launches"] = launches
            out = fn(*inputs.values())
        box["out"] = out
        return out

    record = attempt(run)
    out, log = box.get("out"), box.get("log")
    returned = list(out) if isinstance(out, (tuple, list)) else [out]
    changed, contiguous = [], {}
    for name, t in zip(outputs, returned):
        if isinstance(t, torch.Tensor):
            roles[name] = _span(t)
            contiguous[name] = t.is_contiguous()
            if _changed_after_kernels(t, log):
                changed.append(name)
    more = extra(out) if extra is not None and record["ok"] else {}
    for name, t in more.items():
        roles.setdefault(name, _span(t))
    if keep is not None:
        keep.update(out=out, **more)
    result = {
        "call": record,
        "traffic": _traffic_data(log or [], roles),
        "atomic": atomics.per_role(roles),
        "races": _race_lines(log or []),
        "contiguous": contiguous,
        "changed_after_kernels": changed,
        "inputs_changed": _inputs_changed({n: roles[n] for n in originals}, originals, log),
        "launches": list(box.get("launches", [])),
    }
    if made is not None:
        result["made"] = made.big[:5]
    return result


def _finish(cases: list[dict], compile_them: bool) -> dict:
    """The probe's answer: the cases without the launches they recorded, and, where asked,
    every kernel they launched compiled for sm_90 and sm_80 (:func:`.kernels._compile`)."""
    launches = []
    for one in cases:
        for part in (one, one.get("forward") or {}, one.get("backward") or {}):
            launches += part.pop("launches", [])
    return {"cases": cases, "launches": _for_compiling(launches) if compile_them else []}


def _probe_forward_lse(fn, specs: list, compile_them: bool = False) -> dict:
    """Probe: ``attention_forward_lse`` on each case, counted."""
    cases = []
    for spec in specs:
        q, k, v, _ = make_backward_inputs(spec)
        cases.append(_counted(fn, {"q": q, "k": k, "v": v}, ("o", "lse"), spec))
    return _finish(cases, compile_them)


def _probe_backward(fn, specs: list, compile_them: bool = False) -> dict:
    """Probe: ``attention_backward`` on each case, given exact o and lse, counted."""
    cases = []
    for spec in specs:
        q, k, v, do = make_backward_inputs(spec)
        o, lse = _given_o_lse(spec, q, k, v)
        inputs = {"q": q, "k": k, "v": v, "o": o, "lse": lse, "do": do}
        cases.append(_counted(fn, inputs, GRADS, spec))
    return _finish(cases, compile_them)


def _saved_lse(length: int):
    """For :func:`_counted`'s ``extra``: the ``(L,)`` float32 tensor the forward saved for the
    backward (``out.grad_fn.saved_tensors``), as role ``"lse"``; the shapes of all it saved as
    ``"saved_shapes"`` is recorded by the probe."""

    def extra(out) -> dict:
        if not isinstance(out, torch.Tensor) or out.grad_fn is None:
            return {}
        try:
            saved = list(out.grad_fn.saved_tensors)
        except Exception:  # noqa: BLE001 - a grad_fn without saved tensors
            return {}
        found = [t for t in saved if tuple(t.shape) == (length,) and t.dtype == torch.float32]
        return {"lse": found[0]} if found else {}

    return extra


def _probe_flash(fn, specs: list, compile_them: bool = False) -> dict:
    """Probe: ``out = flash_attention(q, k, v)`` on tensors that require grad, counted (the
    ``(L,)`` float32 tensor saved for the backward named ``lse``); then
    ``torch.autograd.grad(out, (q, k, v), do)``, counted, with q, k, v, ``o`` (out), that
    ``lse`` and ``do`` as roles (the saved tensors held until the backward ends)."""
    results = []
    for spec in specs:
        q, k, v, do = make_backward_inputs(spec, requires_grad=True)
        keep: dict = {}
        fwd = _counted(fn, {"q": q, "k": k, "v": v}, ("o",), spec, _saved_lse(spec[0]), keep)
        one: dict = {"forward": fwd}
        results.append(one)
        out = keep.get("out")
        if not isinstance(out, torch.Tensor):
            continue
        fwd["call"] = {"ok": True, "value": out.detach()}  # handed over without its graph
        one["requires_grad"] = out.requires_grad
        one["grad_fn"] = type(out.grad_fn).__name__ if out.grad_fn is not None else None
        saved: list = []
        with contextlib.suppress(Exception):
            saved = list(out.grad_fn.saved_tensors)
        one["saved"] = [list(t.shape) for t in saved]
        one["lse_saved"] = "lse" in keep
        if out.grad_fn is None:
            continue
        inputs = {"q": q, "k": k, "v": v, "o": out, "do": do}
        if "lse" in keep:
            inputs["lse"] = keep["lse"]

        def grads(*_, out=out, q=q, k=k, v=v, do=do):
            return torch.autograd.grad(out, (q, k, v), do)

        one["backward"] = _counted(grads, inputs, GRADS, spec)
        del saved, keep, inputs
    return _finish(results, compile_them)


# --------------------------------------------------------------------------- bounds
def forward_lse_bounds(length: int, s: int, d: int, programs: int) -> dict[str, int]:
    """The bytes ``attention_forward_lse``'s kernel may move (float32): stores exactly ``o``
    (``L*d*4``) and ``lse`` (``L*4``), nothing else; loads as Exercise 4's
    (:func:`.kernels.attention_bounds`: q at most ``L*d*4``, k and v at most once per program
    instance that stores, ``programs*S*d*4`` each)."""
    loads = attention_bounds(length, s, d, programs)
    return {
        "q": loads["q"],
        "k": loads["k"],
        "v": loads["v"],
        "o": length * d * F32,
        "lse": length * F32,
    }


def backward_bounds(length: int, s: int, d: int, programs: int) -> dict[str, int]:
    """The bytes ``attention_backward``'s kernels may move (float32), ``programs`` counting the
    program instances that stored something, over all launches:

    * stores: ``dq`` (``L*d*4``), ``dk`` and ``dv`` (``S*d*4`` each) exactly once each with
      ``tl.store`` (``dq`` may instead be accumulated with ``tl.atomic_add``, then once per key
      block), plus at most ``L*4`` bytes (``"scratch"``) into one other tensor: ``D``, one
      float per query; nothing else (no ``L x S`` probabilities or scores);
    * loads: each of q, k, v, o, do and lse at most once per program instance
      (``programs`` times its bytes: a program per key block reads every query block once, a
      program per query block every key block once), and at most ``programs*L*4`` bytes from
      the scratch ``D``.
    """
    ld, sd = length * d * F32, s * d * F32
    return {
        "dq": ld,
        "dk": sd,
        "dv": sd,
        "scratch": length * F32,
        "load_q": programs * ld,
        "load_k": programs * sd,
        "load_v": programs * sd,
        "load_o": programs * ld,
        "load_do": programs * ld,
        "load_lse": programs * length * F32,
        "load_other": programs * length * F32,
    }


# --------------------------------------------------------------------------- judging
#: Tolerances against float64, ``|got - want| <= atol + rtol * |want|``. The scores are float32
#: products summed over d: where q is scaled by 30 or rows are pushed down they reach the
#: hundreds, and their rounding (up to about 7e-5 measured) goes into P, o and lse alike. So o
#: gets atol 1e-4 (Exercise 4's 1e-5 would leave no margin at d = 64 and q scaled by 30) and
#: lse atol 1e-4 with rtol 1e-5: the reference's worst error is 0.14 and 0.09 of these over the
#: visible, hidden and 200 more drawn cases (tests/test_12_backward.py keeps the visible and
#: hidden ones under 0.25); a wrong lse (no max, base 2) is off by units.
O_TOL = (1e-4, 1e-4)
LSE_TOL = (1e-5, 1e-4)
#: Gradients against float64 SDPA: ``atol`` is relative to G, the case's largest |gradient| of
#: dq, dk and dv together (with one key, dq and dk are 0 in exact arithmetic and float32 leaves
#: about 1e-7 * |dP|: a scale of their own would be about 1e-15). Float32 products and blocked
#: sums, and P = exp(s - lse) recomputed from scores in the hundreds, whose rounding becomes
#: P's relative error: the reference's worst error is 3.8e-5 * G over the same 218 cases, 0.13
#: of this tolerance; the mistakes the messages name are off by 2.5 % to several times G
#: (tests/test_12_backward.py checks that the visible cases catch each).
GRAD_TOL = {"rtol": 1e-4, "atol": 2e-4}


def _label(name: str, spec: tuple, roles: tuple = ("q", "k", "v", "o", "do")) -> str:
    length, s, d, _, pads, q_scale, negative = spec
    text = f"{name}(q ({length}, {d}), k and v ({s}, {d})"
    order = ("q", "k", "v", "o", "do")
    strided = [f"{r} {d + p}" for r, p in zip(order, pads) if p and r in roles]
    if strided:
        text += ", row strides " + ", ".join(strided)
    if q_scale != 1.0:
        text += f", q scaled by {q_scale:g}"
    if negative:
        text += f", {negative} row(s) whose scores are all below -110"
    return text + ")"


def _fail_made(label: str, seen: dict, length: int, s: int) -> None:
    made = seen.get("made", [])
    if made:
        op, shape = made[0]
        fail(
            f"{label}: a tensor of {math.prod(shape)} elements was made by torch",
            yours=f"{op} made a tensor of shape {tuple(shape)}",
            expected=f"no tensor of L*S = {length * s} elements or more: P, dP and dS of a "
            "block of queries against a block of keys live in the kernel's registers",
            cause="the L x S scores or probabilities are materialized (q @ k.T, a softmax or "
            "a scratch tensor for a kernel): FlashAttention's backward recomputes "
            "P = exp(s * scale - lse) block by block inside the kernels instead",
        )


def _returned(label: str, seen: dict, shapes: dict[str, tuple]) -> list[torch.Tensor]:
    """The returned tensors, checked: a tuple of len(shapes) float32 tensors of those shapes,
    each contiguous."""
    value = call_student(lambda: outcome(seen["call"]), name=label)
    names = list(shapes)
    many = len(names) > 1
    items = list(value) if many and isinstance(value, (tuple, list)) else [value]
    want = tuple(shapes.values()) if many else shapes[names[0]]
    require(
        len(items) == len(names) and all(isinstance(t, torch.Tensor) for t in items),
        f"{label} must return {'(' + ', '.join(names) + ')' if many else 'a tensor'}",
        yours=type(value).__name__
        + (f" of {len(value)} item(s)" if isinstance(value, (tuple, list)) else ""),
        expected=f"{'a tuple of ' + str(len(names)) + ' tensors' if many else 'a tensor'} "
        f"of shape(s) {want}",
        cause="return the new tensors the kernels wrote, "
        + ("in that order: return " + ", ".join(names) if many else "as torch.empty made it"),
    )
    for name, t in zip(names, items):
        require(
            tuple(t.shape) == shapes[name] and t.dtype == torch.float32,
            f"{label}: {name} has the wrong shape or dtype",
            yours=f"{tuple(t.shape)} {t.dtype}",
            expected=f"{shapes[name]} torch.float32",
            cause=f"allocate {name} with torch.empty({shapes[name]}, dtype=torch.float32, "
            "device=q.device)",
        )
        require(
            seen["contiguous"].get(name, False),
            f"{label}: {name} is not contiguous",
            yours=f"{name} with strides that are not those of a new (rows, d) tensor",
            expected=f"{name} contiguous (a new tensor, torch.empty({shapes[name]}))",
            cause="allocate each result with torch.empty of its shape (not a view of a wider "
            "or shared buffer) and pass its row stride to the kernel",
        )
    return items


def _judge_kernels_wrote(
    label: str, seen: dict, outputs: dict[str, torch.Tensor], launches: str = "any"
) -> None:
    """No lane out of bounds, kernels launched, inputs unchanged, no race, each output written
    whole by the kernels, never read back by plain loads, not changed after the kernels."""
    traffic = seen["traffic"]
    if traffic["oob_lanes"]:
        fail(
            f"{label}: a kernel reached outside the tensors it was given "
            f"({traffic['oob_lanes']} lane(s))",
            yours=traffic["oob"][0],
            expected="every unmasked lane of every tl.load and tl.store inside its tensor",
            cause=MASK_CAUSE + "; the last block of queries runs past L and the last block of "
            "keys past S: mask both (rows < L, cols < S)",
        )
    require(
        bool(traffic["launches"]),
        f"{label} launched no Triton kernel",
        yours="no launch",
        expected="one kernel launch" if launches == "one" else "Triton kernel launches",
        cause="compute the results in your @triton.jit kernels, launched as kernel[grid](...), "
        "not with torch operations",
    )
    if launches == "one":
        require(
            len(traffic["launches"]) == 1,
            f"{label} must launch one kernel",
            yours=traffic["launches"],
            expected="one launch: the forward of Exercise 4, storing lse as well",
            cause="compute o and lse in one kernel: lse_i = m_i + log(l_i) is known at the end "
            "of the loop that computes o_i",
        )
    changed = seen.get("inputs_changed", [])
    require(
        not changed,
        f"{label}: the function changed its input(s) {', '.join(changed)}",
        yours=f"{', '.join(changed)} not as given when a kernel started or when it returned",
        expected="the inputs left as they are (read only)",
        cause="write results into new tensors, never into the inputs",
    )
    races = seen.get("races", [])
    if races:
        fail(
            f"{label}: program instances of one launch race on memory",
            yours=races[0],
            expected="each address stored by one program instance of a launch (or accumulated "
            "with tl.atomic_add), and never loaded by another instance of the same launch",
            cause="several program instances update the same elements with tl.load and "
            "tl.store (here, usually: each key-block program adding its share into dq). On a "
            "GPU they run at once, two read the same old value and one sum is lost, which the "
            "interpreter, running instances one after another, cannot show. Accumulate dq with "
            "tl.atomic_add into zeros, or compute it in its own kernel with a program per block "
            "of queries that loops over the keys",
        )
    for name, t in outputs.items():
        require(
            name not in seen.get("changed_after_kernels", []),
            f"{label}: {name} was changed after the kernels stored it",
            yours=f"values written into {name} by something other than a kernel, after the "
            "launches (a torch operation, a copy, a numpy view)",
            expected=f"{name} exactly as the kernels left it",
            cause=f"compute {name} in a kernel: a result computed with torch after the kernels "
            "is torch's work, not a kernel's",
        )
        row = _role(traffic, name)
        whole = t.numel() * F32
        require(
            row["distinct_stored"] == whole,
            f"{label}: the kernels wrote {row['distinct_stored']} of {name}'s {whole} bytes",
            yours=f"{row['distinct_stored']} bytes of {name} written by kernels "
            f"(launches {traffic['launches']})",
            expected=f"all {whole} bytes of {name} written by a kernel",
            cause=f"no kernel stored into {name}: it is computed with torch operations (after "
            f"or beside the kernels); compute and store it in a kernel"
            if row["distinct_stored"] == 0
            else "the grid misses the last, partial block: launch triton.cdiv(n, BLOCK) program "
            f"instances and store every block of {name}, masked",
        )
        plain = row["loaded"] - seen.get("atomic", {}).get(name, 0)
        require(
            plain == 0,
            f"{label}: the kernels read {name} back",
            yours=f"{plain} bytes loaded from {name} with tl.load",
            expected=f"{name} only stored (or accumulated with tl.atomic_add)",
            cause=f"a load-add-store of {name}: when several program instances (one per key "
            "block) add into the same rows this way, it is a race on a GPU (both read the old "
            "value, one sum is lost); accumulate in registers and store once, or use "
            "tl.atomic_add",
        )


def _require_values(
    label: str,
    name: str,
    got: torch.Tensor,
    want: torch.Tensor,
    rtol: float,
    atol: float,
    cause: str,
    undefined_lanes: int = 0,
) -> None:
    got64 = got.double()
    bad = ~torch.isclose(got64, want, rtol=rtol, atol=atol)
    if not bad.any():
        return
    where = tuple(int(i) for i in bad.nonzero()[0])
    finite = bool(torch.isfinite(got64).all())
    worst = (got64 - want).abs().nan_to_num(math.inf).max().item()
    fail(
        f"{label}: wrong {name} ({int(bad.sum())} of {got.numel()} elements)",
        yours=f"{name}{list(where)} = {got64[where].item():.6g}"
        + ("" if finite else f" ({int((~torch.isfinite(got64)).sum())} inf/nan)")
        + f", largest difference {worst:.3g}",
        expected=f"{want[where].item():.6g} (within rtol={rtol:g}, atol={atol:.3g})",
        cause=cause
        if finite
        else (UNDEFINED_LANES_CAUSE.format(n=undefined_lanes) if undefined_lanes else "")
        + "inf or nan: exp of a raw score overflows float32 above about 88 (scores reach "
        "the hundreds here), and 0/0 where every exp underflows; use the running max in the "
        "forward and P = exp(s * scale - lse), which is at most 1, in the backward. " + cause,
    )


def _softmax_parts(spec: tuple) -> dict:
    """float64 P, dP, D, the scale and the inputs of a case (for the mistakes' variants)."""
    q, k, v, do = (t.double() for t in make_backward_inputs(spec))
    scale = 1.0 / math.sqrt(spec[2])
    p = torch.softmax(q @ k.T * scale, dim=1)
    dp = do @ v.T
    delta = (p * dp).sum(1, keepdim=True)  # = rowsum(do * o)
    return {"q": q, "k": k, "v": v, "do": do, "p": p, "dp": dp, "delta": delta, "scale": scale}


def _mistakes(spec: tuple) -> list[tuple[str, dict[str, torch.Tensor]]]:
    """The gradients that the usual mistakes give, float64, with the cause to name."""
    x = _softmax_parts(spec)
    q, k, p, scale = x["q"], x["k"], x["p"], x["scale"]
    ds_right = p * (x["dp"] - x["delta"])
    ds_no_d = p * x["dp"]
    dv = p.T @ x["do"]
    no_d = (
        "D left out: dS = P * (dP - D) with D_i = sum_j dO_ij * O_ij (= sum_j P_ij dP_ij), "
        "the softmax's Jacobian; dS = P * dP alone is wrong (dv is right: it needs no D)"
    )
    no_scale = (
        "the softmax scale left out of dq and dk: the scores are s = scale * q k^T with "
        "scale = 1/sqrt(d), so dQ = scale * dS K and dK = scale * dS^T Q (yours are sqrt(d) "
        "times too large)"
    )
    return [
        (no_d, {"dq": scale * ds_no_d @ k, "dk": scale * ds_no_d.T @ q, "dv": dv}),
        (no_scale, {"dq": ds_right @ k, "dk": ds_right.T @ q, "dv": dv}),
        (no_d + "; and " + no_scale, {"dq": ds_no_d @ k, "dk": ds_no_d.T @ q, "dv": dv}),
        (
            "the scale applied twice to dq and dk (once to the scores, again at the end, or "
            "to q and to dS): dQ = scale * dS K with dS = P * (dP - D) computed from "
            "P = exp(scale * q k^T - lse)",
            {"dq": scale**2 * ds_right @ k, "dk": scale**2 * ds_right.T @ q, "dv": dv},
        ),
        (
            "dv scaled by the softmax scale: dV = P^T dO has no scale of its own (P already "
            "holds it)",
            {"dq": scale * ds_right @ k, "dk": scale * ds_right.T @ q, "dv": scale * dv},
        ),
    ]


def _grad_cause(spec: tuple, name: str, got: torch.Tensor, atol: float) -> str:
    rtol = GRAD_TOL["rtol"]
    for cause, grads in _mistakes(spec):
        if torch.allclose(got.double(), grads[name], rtol=rtol, atol=atol):
            return cause
    pads = spec[4]
    strided = any(pads) and (
        "rows are strided here (each of q, k, v, o and do with its own row stride): address "
        "row i of each at ptr + i * t.stride(0); "
    )
    general = {
        "dv": "dV = P^T dO, P = exp(s * scale - lse) (natural log, as lse is), with P = 0 for "
        "keys past S and queries past L",
        "dq": "dQ = scale * dS K with dS = P * (dP - D), dP = dO V^T, D_i = sum_j dO_ij O_ij; "
        "a program per block of queries loops over every block of keys",
        "dk": "dK = scale * dS^T Q, summed over every block of queries (mask the queries past "
        "L: their P must be 0)",
    }
    return (strided or "") + general[name]


def _judge_values_backward(
    label: str, spec: tuple, grads: list[torch.Tensor], undefined_lanes: int = 0
) -> None:
    want = expected_gradients(spec)
    scale_g = max(w.abs().max().item() for w in want)
    atol = GRAD_TOL["atol"] * scale_g
    for name, got, w in zip(GRADS, grads, want):
        bad = ~torch.isclose(got.double(), w, rtol=GRAD_TOL["rtol"], atol=atol)
        if bad.any():
            cause = _grad_cause(spec, name, got, atol)
            _require_values(label, name, got, w, GRAD_TOL["rtol"], atol, cause, undefined_lanes)


def _judge_backward_bytes(label: str, spec: tuple, seen: dict) -> None:
    length, s, d = spec[:3]
    traffic, atomic = seen["traffic"], seen.get("atomic", {})
    programs = traffic["storing_programs"]
    bounds = backward_bounds(length, s, d, programs)
    other = _role(traffic, "other")
    require(
        other["stored"] <= bounds["scratch"],
        f"{label}: the kernels stored {other['stored']} bytes into tensors other than dq, dk "
        "and dv",
        yours=f"{other['stored']} bytes into {sorted(set(other.get('names', [])))}",
        expected=f"at most {bounds['scratch']} (D: one float per query)",
        cause="an intermediate of L x S (the probabilities P, the scores or dS) or of partial "
        "gradients stored to memory: recompute P = exp(s * scale - lse) block by block in "
        "registers, in each kernel that needs it; only D = rowsum(dO * O) may be kept in memory",
    )
    for name in GRADS:
        row = _role(traffic, name)
        plain = row["stored"] - atomic.get(name, 0)
        if atomic.get(name, 0):
            require(
                plain == 0,
                f"{label}: {name} both stored and accumulated with atomics",
                yours=f"{plain} bytes stored with tl.store, {atomic[name]} with atomics",
                expected=f"{name} either stored once or accumulated with tl.atomic_add into zeros",
                cause="start from torch.zeros and add every contribution with tl.atomic_add",
            )
        else:
            require(
                plain == bounds[name],
                f"{label}: the kernels stored {plain} bytes into {name}",
                yours=f"{plain} bytes ({plain / bounds[name]:.3g} x its {bounds[name]})",
                expected=f"exactly {bounds[name]}: each element stored once",
                cause=f"{name} stored more than once (a partial sum stored after each block?): "
                "accumulate in registers across the loop and store once at the end",
            )
    grads_stored = sum(_role(traffic, n)["stored"] for n in GRADS)
    require(
        traffic["stores"] == grads_stored + other["stored"],
        f"{label}: the kernels stored into their inputs",
        yours=f"{traffic['stores'] - grads_stored - other['stored']} bytes into q, k, v, o, lse "
        "or do",
        expected="stores into dq, dk, dv and D only",
        cause="write results into new tensors",
    )
    why = {
        "lse": "lse not read: the backward recomputes each row's max and sum of exp (a first "
        "pass over the keys) instead of P = exp(s * scale - lse) from the lse the forward "
        "stored",
        "o": "o not read: D_i = rowsum(dO_i * O_i) must be computed in a kernel from o and do "
        "(not left out, not computed with torch)",
    }
    nbytes = {
        "q": length * d,
        "k": s * d,
        "v": s * d,
        "o": length * d,
        "do": length * d,
        "lse": length,
    }
    for name in INPUTS:
        row = _role(traffic, name)
        whole = nbytes[name] * F32
        # distinct bytes are counted per launch and added up: two launches reading all of q
        # give twice its bytes; fewer than its bytes is a part of it never read
        require(
            row["distinct_loaded"] >= whole,
            f"{label}: the kernels read {row['distinct_loaded']} of {name}'s {whole} bytes",
            yours=f"{row['distinct_loaded']} bytes of {name} read",
            expected=f"all of {name}, from the tensor given (no copy)",
            cause=why.get(
                name,
                "every gradient depends on all of q, k, v and do: the grids must cover every "
                "block, the loops every block of the other side; pass the tensors themselves "
                "and their row strides (no .contiguous() copy)",
            ),
        )
    for name in INPUTS:
        loaded, whole = _role(traffic, name)["loaded"], nbytes[name] * F32
        most = bounds[f"load_{name}"]
        require(
            loaded <= most,
            f"{label}: {name} loaded {loaded} bytes by {programs} program instance(s)",
            yours=f"{loaded} bytes ({loaded / whole:.3g} x {name})",
            expected=f"at most {most}: {name} once per program instance",
            cause="a block read several times per program: a first pass over the keys for the "
            "max and the sum (lse gives them), or a loop inside a loop over the same blocks",
        )
    if other["loaded"]:
        require(
            other["nbytes"] <= length * F32 and other["loaded"] <= bounds["load_other"],
            f"{label}: the kernels read a tensor other than q, k, v, o, lse, do and D",
            yours=f"{other['loaded']} bytes from {sorted(set(other.get('names', [])))} "
            f"(the largest {other['nbytes']} bytes)",
            expected=f"besides the inputs, at most D ({length * F32} bytes), at most once per "
            "program instance",
            cause="a copy of an input (.contiguous(), q * scale made with torch) or an "
            "intermediate computed before the kernels: pass the tensors themselves and "
            "compute inside the kernels",
        )


def _judge_backward(spec: tuple, seen: dict, label: str | None = None) -> None:
    length, s, d = spec[:3]
    label = label or _label("attention_backward", spec)
    _fail_made(label, seen, length, s)
    grads = _returned(label, seen, {"dq": (length, d), "dk": (s, d), "dv": (s, d)})
    _judge_kernels_wrote(label, seen, dict(zip(GRADS, grads)))
    lanes = (seen.get("traffic") or {}).get("undefined_lanes", 0)
    _judge_values_backward(label, spec, grads, lanes)
    _judge_backward_bytes(label, spec, seen)


def _lse_cause(spec: tuple, got: torch.Tensor, want: torch.Tensor) -> str:
    q, k, _, _ = (t.double() for t in make_backward_inputs(spec))
    scores = q @ k.T / math.sqrt(spec[2])
    m = scores.max(1).values
    rtol, atol = LSE_TOL
    variants = [
        (
            want / math.log(2),
            "lse in base 2: with exp2, m and l are in base-2 units; store "
            "lse in natural-log units, (m2 + log2(l)) * ln(2), or convert where you use it",
        ),
        (m, "lse is the running max alone: lse_i = m_i + log(l_i)"),
        (want - m, "lse is log(l_i) alone: add the running max, lse_i = m_i + log(l_i)"),
    ]
    for value, cause in variants:
        if torch.allclose(got.double(), value, rtol=rtol, atol=atol):
            return cause
    return (
        "lse_i = m_i + log(l_i): the final running max and running sum of exp(s - m) of "
        "row i, in natural-log units of the scaled scores (scale = 1/sqrt(d))"
    )


def _judge_forward_lse(spec: tuple, seen: dict, label: str | None = None) -> None:
    length, s, d = spec[:3]
    label = label or _label("attention_forward_lse", spec, roles=("q", "k", "v"))
    _fail_made(label, seen, length, s)
    o, lse = _returned(label, seen, {"o": (length, d), "lse": (length,)})
    traffic = seen["traffic"]
    lse_row = _role(traffic, "lse")
    require(
        lse_row["distinct_stored"] > 0 or "lse" in seen.get("changed_after_kernels", []),
        f"{label}: the kernel did not store lse",
        yours=f"0 of lse's {length * F32} bytes written by the kernel",
        expected=f"lse (L*4 = {length * F32} bytes) stored by the forward's kernel, beside o",
        cause="the forward must store each row's log-sum-exp, lse_i = m_i + log(l_i), at the "
        "end of its loop (one float per query): the backward recomputes P = exp(s * scale - "
        "lse) from it, without a pass over the keys to find each row's max and sum again",
    )
    _judge_kernels_wrote(label, seen, {"o": o, "lse": lse}, launches="one")
    o64, lse64 = exact_forward(*make_backward_inputs(spec)[:3])
    _require_values(
        label,
        "o",
        o,
        o64,
        *O_TOL,
        "o = softmax(q k^T / sqrt(d)) v, as Exercise 4's attention_forward",
        traffic.get("undefined_lanes", 0),
    )
    lanes = traffic.get("undefined_lanes", 0)
    _require_values(label, "lse", lse, lse64, *LSE_TOL, _lse_cause(spec, lse, lse64), lanes)
    programs = traffic["storing_programs"]
    bounds = forward_lse_bounds(length, s, d, programs)
    want = bounds["o"] + bounds["lse"]
    require(
        traffic["stores"] == want,
        f"{label}: the kernel stored {traffic['stores']} bytes",
        yours=f"{traffic['stores']} bytes (o: {_role(traffic, 'o')['stored']}, lse: "
        f"{lse_row['stored']}, other tensors: {_role(traffic, 'other')['stored']})",
        expected=f"exactly o's {bounds['o']} and lse's {bounds['lse']} bytes, each once",
        cause="the forward stores o and lse and nothing else: no L x S scores or probabilities "
        "(the backward recomputes them from lse)",
    )
    other = _role(traffic, "other")
    require(
        other["loaded"] == 0,
        f"{label}: the kernel read a tensor other than q, k and v",
        yours=f"{other['loaded']} bytes loaded from {other.get('names', [])}",
        expected="loads from q, k and v themselves",
        cause="pass q, k and v and their row strides to the kernel (no copy, no torch "
        "intermediate)",
    )
    for role in ("q", "k", "v"):
        row = _role(traffic, role)
        whole = (length if role == "q" else s) * d * F32
        require(
            row["distinct_loaded"] == whole and row["loaded"] <= bounds[role],
            f"{label}: {role} loaded {row['loaded']} bytes ({row['distinct_loaded']} distinct) "
            f"by {programs} program instance(s)",
            yours=f"{row['loaded']} bytes, {row['distinct_loaded']} of {whole} distinct",
            expected=f"all of {role}, at most {bounds[role]} bytes"
            + (" (each query once)" if role == "q" else " (once per program instance)"),
            cause="online softmax, as in Exercise 4: one pass over the blocks of keys per block "
            "of queries, every block covered",
        )


def _check_forward_lse(fn_obj, specs: list, compile_them: bool) -> str:
    fn = student(fn_obj, "attention_forward_lse")
    got = call_student(
        fn.probe, _probe_forward_lse, specs, compile_them, name="attention_forward_lse"
    )
    for spec, one in zip(specs, got["cases"]):
        _judge_forward_lse(tuple(spec), one)
    if not compile_them:
        return ""
    return _judge_compiled(
        "attention_forward_lse", _compiled(fn, got["launches"], "attention_forward_lse")
    )


def check_attention_forward_lse(attention_forward_lse) -> None:
    """Check ``attention_forward_lse(q, k, v) -> (o, lse)``: o and lse against float64 on the
    visible cases (:data:`BACKWARD_CASES`: L and S not multiples of a block, one query, one key,
    strided rows, scores in the hundreds, rows of very negative scores); one launch; every lane
    in bounds; stores exactly o and lse (:func:`forward_lse_bounds`); no ``L x S`` tensor; q, k
    and v read whole, k and v at most once per program instance; the kernel compiled for sm_90
    and sm_80 (:func:`.kernels._judge_compiled`).

    Raises:
        CheckFailed: the first case that differs, with the likely cause.
    """
    facts = _check_forward_lse(attention_forward_lse, BACKWARD_CASES, True)
    passed(
        f"attention_forward_lse: {len(BACKWARD_CASES)} cases, o and lse right, only o and lse "
        f"stored; {facts}"
    )


def check_attention_forward_lse_hidden(attention_forward_lse) -> None:
    """Hidden: the drawn cases (:data:`BACKWARD_HIDDEN`), judged alike."""
    _check_forward_lse(attention_forward_lse, BACKWARD_HIDDEN, False)
    passed(f"attention_forward_lse: {len(BACKWARD_HIDDEN)} drawn cases")


def _check_backward(fn_obj, specs: list, compile_them: bool) -> str:
    fn = student(fn_obj, "attention_backward")
    got = call_student(fn.probe, _probe_backward, specs, compile_them, name="attention_backward")
    for spec, one in zip(specs, got["cases"]):
        _judge_backward(tuple(spec), one)
    if not compile_them:
        return ""
    return _judge_compiled(
        "attention_backward", _compiled(fn, got["launches"], "attention_backward")
    )


def check_attention_backward(attention_backward) -> None:
    """Check ``attention_backward(q, k, v, o, lse, do) -> (dq, dk, dv)``, given exact o and lse,
    on the visible cases (:data:`BACKWARD_CASES`): the gradients against float64 SDPA's
    (:data:`GRAD_TOL`); every lane in bounds; no race; no ``L x S`` tensor made by torch;
    stores and loads within :func:`backward_bounds` (each gradient once, at most ``L*4`` bytes
    of D besides; q, k, v, o, do and lse read whole from the tensors given, once per program
    at most); every kernel compiled for sm_90 and sm_80.

    Raises:
        CheckFailed: the first case that differs, with the likely cause.
    """
    facts = _check_backward(attention_backward, BACKWARD_CASES, True)
    passed(
        f"attention_backward: {len(BACKWARD_CASES)} cases, dq, dk, dv right, no race, only the "
        f"gradients and D stored, no L x S tensor; {facts}"
    )


def check_attention_backward_hidden(attention_backward) -> None:
    """Hidden: the drawn cases (:data:`BACKWARD_HIDDEN`), judged alike."""
    _check_backward(attention_backward, BACKWARD_HIDDEN, False)
    passed(f"attention_backward: {len(BACKWARD_HIDDEN)} drawn cases")


def _judge_flash(spec: tuple, one: dict) -> None:
    length, s, d = spec[:3]
    label = _label("flash_attention", spec, roles=("q", "k", "v", "do"))
    fwd = one["forward"]
    _fail_made(label, fwd, length, s)
    (o,) = _returned(label, fwd, {"o": (length, d)})
    require(
        bool(one.get("requires_grad")) and one.get("grad_fn") is not None,
        f"{label}: the output is not differentiable",
        yours=f"requires_grad={one.get('requires_grad')}, grad_fn={one.get('grad_fn')}",
        expected="an output with a grad_fn (FlashAttentionBackward), for q, k, v that require grad",
        cause="return FlashAttention.apply(q, k, v), a torch.autograd.Function whose forward "
        "and backward call your kernels (kernels are invisible to autograd: a tensor a kernel "
        "wrote has no grad_fn)",
    )
    o64, _ = exact_forward(*make_backward_inputs(spec)[:3])
    _require_values(
        label, "o", o, o64, *O_TOL, "o = softmax(q k^T / sqrt(d)) v: call attention_forward_lse"
    )
    traffic = fwd["traffic"]
    lse_row = _role(traffic, "lse")
    require(
        bool(one.get("lse_saved")),
        f"{label}: the forward saved no ({length},) float32 lse for the backward",
        yours=f"saved with ctx.save_for_backward: tensors of shapes {one.get('saved')}",
        expected=f"ctx.save_for_backward(q, k, v, o, lse), lse ({length},) float32",
        cause="save what the backward needs with ctx.save_for_backward (not as ctx attributes, "
        "and not recomputed by running the forward again in the backward): q, k, v, o and the "
        "lse of attention_forward_lse",
    )
    require(
        lse_row["distinct_stored"] == length * F32,
        f"{label}: the lse the forward saved was not written by its kernel",
        yours=f"{lse_row['distinct_stored']} of its {length * F32} bytes stored by the forward's "
        "kernel",
        expected="lse stored by the forward's kernel (m_i + log(l_i) at the end of its loop)",
        cause="attention_forward_lse must store lse in its kernel: see test_attention_backward",
    )
    _judge_kernels_wrote(label + " forward", fwd, {"o": o})
    want = length * d * F32 + length * F32
    require(
        traffic["stores"] == want,
        f"{label}: the forward's kernels stored {traffic['stores']} bytes",
        yours=f"{traffic['stores']} bytes (o: {_role(traffic, 'o')['stored']}, lse: "
        f"{lse_row['stored']}, other: {_role(traffic, 'other')['stored']})",
        expected=f"exactly o and lse, {want} bytes",
        cause="the forward stores o and lse, nothing of size L x S (the backward recomputes P)",
    )
    bwd = one.get("backward")
    require(
        bwd is not None,
        f"{label}: no backward ran",
        yours="no backward",
        expected="torch.autograd.grad(out, (q, k, v), do) running your backward",
        cause="return FlashAttention.apply(q, k, v)",
    )
    blabel = f"{label}, then torch.autograd.grad (your backward)"
    _judge_backward(spec, bwd, blabel)


def _check_flash(fn_obj, specs: list, compile_them: bool) -> str:
    fn = student(fn_obj, "flash_attention")
    got = call_student(fn.probe, _probe_flash, specs, compile_them, name="flash_attention")
    for spec, one in zip(specs, got["cases"]):
        _judge_flash(tuple(spec), one)
    if not compile_them:
        return ""
    return _judge_compiled("flash_attention", _compiled(fn, got["launches"], "flash_attention"))


def check_flash_attention(flash_attention) -> None:
    """Check ``flash_attention(q, k, v)`` end to end on :data:`FLASH_CASES`: the output, a
    ``grad_fn``, the forward's stores (o and an ``(L,)`` float32 lse saved with
    ``ctx.save_for_backward``, nothing else), then ``torch.autograd.grad(out, (q, k, v), do)``
    judged as :func:`check_attention_backward` judges ``attention_backward`` (lse read by the
    backward's kernels); every kernel compiled for sm_90 and sm_80.

    Raises:
        CheckFailed: the first case that differs, with the likely cause.
    """
    facts = _check_flash(flash_attention, FLASH_CASES, True)
    passed(
        f"flash_attention: {len(FLASH_CASES)} cases, differentiable, lse saved and used, "
        f"gradients right; {facts}"
    )


def check_flash_attention_hidden(flash_attention) -> None:
    """Hidden: drawn cases (:data:`FLASH_HIDDEN`), judged alike."""
    _check_flash(flash_attention, FLASH_HIDDEN, False)
    passed(f"flash_attention: {len(FLASH_HIDDEN)} drawn cases")


# --------------------------------------------------------------------------- on a GPU
#: The ``_cuda`` check's case: L = S = 4096, d = 64, contiguous.
BACKWARD_CUDA_SPEC = backward_case(4096, 4096, 64, 4)
#: Tolerances on the GPU, relative to the case's largest gradient G as on the CPU: tl.dot on
#: float32 uses TF32 by default (10-bit mantissa: each operand rounded by up to 2**-11
#: relative), in the scores (hence P) and in every product of the backward; kernels.py's
#: forward uses 2e-2. TF32 emulated on the CPU for this case (every product's operands rounded
#: to 10 mantissa bits, float64 otherwise) is off by 1.2e-3 * G at worst, 0.03 of this
#: tolerance, while D left out is off by 0.17 * G and the scale left out by 7 * G.
BACKWARD_CUDA_TOL = {"rtol": 2e-2, "atol": 2e-2}
#: The most the student's backward may take against SDPA's backward (torch.autograd.grad of
#: F.scaled_dot_product_attention's float32 output, timed alone), in one probe. The reference
#: (32 x 32 blocks, TF32 dots) took 0.54 x SDPA's backward with this probe on an H200 (torch
#: 2.11, triton 3.6, 2026-11-28: ``triton_check_time_ratio_attention_backward`` in
#: ``images/recorded_figures.json``); about ten times that, as for the forward
#: (:data:`.kernels.MAX_TIME_RATIO`).
BACKWARD_MAX_TIME_RATIO = 5.0


def _rows(spec: tuple) -> list[int]:
    """The rows of dq, dk and dv handed back: :data:`.kernels.CUDA_ROWS` inside L and S."""
    return [r for r in CUDA_ROWS if r < min(spec[0], spec[1])]


def _probe_backward_cuda(fn, spec: tuple = BACKWARD_CUDA_SPEC, device: str = "cuda") -> dict:
    """Probe: ``attention_backward`` on ``device`` tensors of the case, given exact o and lse;
    the gradients' :func:`_rows` handed back; its time and SDPA's backward time
    (``torch.utils.benchmark``, medians of blocked runs, after a first call that compiles)."""
    from torch.utils import benchmark

    q, k, v, do = make_backward_inputs(spec, device=device)
    o, lse = _given_o_lse(spec, q, k, v, device=device)
    rows = _rows(spec)
    seen: dict = {}
    with _autotune_without_timing(seen):
        record = attempt(lambda: [g.float()[rows].cpu() for g in fn(q, k, v, o, lse, do)])
        if not record["ok"]:
            return {"call": record}
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*(t[None] for t in leaves))[0]
        env = {"fn": fn, "q": q, "k": k, "v": v, "o": o, "lse": lse, "do": do, "torch": torch,
               "out": out, "leaves": leaves}  # fmt: skip
        mine = benchmark.Timer("fn(q, k, v, o, lse, do)", globals=env).blocked_autorange(
            min_run_time=0.5
        )
        theirs = benchmark.Timer(
            "torch.autograd.grad(out, leaves, do, retain_graph=True)", globals=env
        ).blocked_autorange(min_run_time=0.5)
    return {
        "call": record,
        "mine_s": mine.median,
        "torch_s": theirs.median,
        "device": torch.cuda.get_device_name(0) if device == "cuda" else device,
    }


def _check_backward_on(attention_backward, spec: tuple, device: str) -> None:
    """The ``_cuda`` check's probe and verdict for one case on one device (a small case on the
    CPU, under the interpreter, in the tests)."""
    fn = student(attention_backward, "attention_backward")
    label = f"attention_backward on {device} tensors (L = {spec[0]}, S = {spec[1]}, d = {spec[2]})"
    seen = call_student(fn.probe, _probe_backward_cuda, spec, device, name=label)
    got = call_student(lambda: outcome(seen["call"]), name=label)
    rows = _rows(spec)
    want = [w[rows].cpu() for w in expected_gradients(spec, device=device)]
    scale_g = max(w.abs().max().item() for w in want)
    rtol, atol = BACKWARD_CUDA_TOL["rtol"], BACKWARD_CUDA_TOL["atol"] * scale_g
    require(
        isinstance(got, list) and len(got) == 3,
        f"{label} must return (dq, dk, dv)",
        yours=type(got).__name__,
        expected="three tensors",
        cause="return dq, dk, dv",
    )
    for name, g, w in zip(GRADS, got, want):
        bad = ~torch.isclose(g.double(), w, rtol=rtol, atol=atol)
        require(
            not bad.any(),
            f"{label}: wrong {name}",
            yours=f"{int(bad.sum())} elements off, max difference "
            f"{(g.double() - w).abs().max().item():.3g}",
            expected=f"within rtol={rtol:g}, atol={atol:.3g}",
            cause="the CPU checks pass? Then look for what the interpreter does not show: a "
            "race between program instances (a load-add-store of dq from several key blocks), "
            "or num_warps/num_stages in a config the interpreter ignored",
        )
    ratio = seen["mine_s"] / seen["torch_s"]
    require(
        ratio <= BACKWARD_MAX_TIME_RATIO,
        f"attention_backward on {seen['device']}: {seen['mine_s'] * 1e3:.3f} ms, SDPA's "
        f"backward {seen['torch_s'] * 1e3:.3f} ms",
        yours=f"{ratio:.2f} x SDPA's backward time",
        expected=f"at most {BACKWARD_MAX_TIME_RATIO:g} x",
        cause="blocks too small for the GPU, extra passes over memory (P recomputed more than "
        "twice, D recomputed per block), or dq accumulated with too many atomics",
    )
    passed(f"attention_backward: {ratio:.2f} x the time of SDPA's backward ({seen['device']})")


def check_attention_backward_cuda(attention_backward) -> None:
    """CUDA: dq, dk, dv at L = S = 4096, d = 64 (float32, TF32 in tl.dot) against float64 SDPA
    gradients (:data:`BACKWARD_CUDA_TOL`), and the time against SDPA's backward (at most
    :data:`BACKWARD_MAX_TIME_RATIO`)."""
    if not cuda_or_not_checked("attention_backward against SDPA's backward on a GPU"):
        return
    _check_backward_on(attention_backward, BACKWARD_CUDA_SPEC, "cuda")
