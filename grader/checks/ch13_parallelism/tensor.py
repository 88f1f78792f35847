"""Checks for 13_parallelism, part *tensor*: ``ColumnRowMLP`` (tensor parallelism, Megatron-LM's
column-then-row split of an MLP) and ``SequenceParallelMLP`` (sequence parallelism around it).

Everything graded runs on the CPU with the gloo backend, in real separate processes started by the
course's launcher (:func:`grader.runtime.distributed.run_ranks`, with a deadline: ranks that wait
forever in a collective fail within seconds). The ranks run in the student's process (the
``_probe_*`` functions, reached through :mod:`grader.runtime.remote`); each builds the full
(unsplit) layers from a seed, hands them to the student's class, runs one forward and one
backward and hands back plain data: outputs, the input's gradient, every parameter of the
student's module with its gradient, the bytes of parameters it holds, the bytes autograd saved
for backward during its forward (``torch.autograd.graph.saved_tensors_hooks``), and its
**timeline** (:class:`grader.runtime.collectives.CommTimeline`: every collective at PyTorch's
dispatcher, whatever function the student called, with its bytes, split into forward and backward
by course markers). The unsplit module's outputs and gradients and every verdict are computed
here, in the grading process.

The student's parameters are matched to the unsplit layers by value (a shard is a slice of a
full weight, possibly transposed), so any naming and layout of the shards is accepted; their
gradients are then compared with the same slices of the unsplit gradients.

Three checks make sure the rank's work is really split (each found as a hole by an answer that
got full marks without them): the timeline keeps a copy of what each collective **sent**
(:class:`_SentTimeline`), which must be this rank's partial result (no exchange beside the
collectives: a file, shared memory, a global tensor); the **storage** behind the parameters is at
most the shards' bytes (a shard that is a view keeps the whole weight); and after the first run
each rank **multiplies its parameters in place** (each rank by its own factor) and runs again,
whose output and input gradient must follow (a module computing from a hidden full copy does
not).

May import: :mod:`grader.checks.common` and :mod:`grader.runtime` (never another checks module).
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import nn

from grader.checks.common import fail, not_attempted, passed, require
from grader.runtime.collectives import CommTimeline, _tensors, collective_kind, warm_up_timeline
from grader.runtime.distributed import RanksFailed, default_start_method, run_ranks
from grader.runtime.remote import student

ASSIGNMENT = "13_parallelism"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True
#: Bytes of parameters and buffers a rank may hold beyond its shards: room for a small buffer
#: (a rank index, a scale), far less than any shard of another rank the checks use (the smallest,
#: fc1's bias shard of Linear(10, 12) on 2 ranks in float64, is 48 bytes).
SMALL_BUFFER_BYTES = 32

#: How a rank's traceback ends when the exercise's stub raised (a bare NotImplementedError).
_STUB = re.compile(r"raise NotImplementedError\(\)|^NotImplementedError\s*$", re.MULTILINE)

__all__ = [
    "check_column_row_mlp",
    "check_column_row_mlp_hidden",
    "check_sequence_parallel_mlp",
    "check_sequence_parallel_mlp_hidden",
    "full_layers",
    "rank_deadline_s",
    "saved_bytes",
    "unsplit_mlp",
]


def rank_deadline_s(world_size: int = 2) -> float:
    """Deadline of a checked run, seconds: forked ranks of these tiny layers finish in about a
    second (4 ranks on 2 cores in two), so a rank still waiting after 20 s waits for a collective
    that another rank never calls; spawned ranks (machines with a GPU) first import torch, so
    they get 90 s."""
    return 20.0 if default_start_method() == "fork" else 90.0


def _ranks_failed(what: str, text: str, label: str) -> None:
    if _STUB.search(text):
        raise not_attempted(label) from None
    hung = "had not finished at the deadline" in text
    fail(
        what,
        yours=text[-1500:],
        expected="every rank finishes without error",
        cause="a rank waited in a collective that another rank never called: every rank must "
        "call the same collectives, in the same order, with the same sizes"
        if hung
        else "read the rank's traceback above",
    )


# --------------------------------------------------------------------------- shared pieces
def full_layers(
    d_model: int, d_ff: int, seed: int, dtype: torch.dtype = torch.float32, eps: float = 1e-5
):
    """The unsplit layers a check hands to every rank: ``LayerNorm(d_model, eps)`` (with weight
    and bias, set to random values so that their gradients are not trivial), ``Linear(d_model,
    d_ff)`` and ``Linear(d_ff, d_model)``, seeded, in ``dtype``.

    Returns:
        ``(norm, fc1, fc2)``.
    """
    g = torch.Generator().manual_seed(seed)
    norm = nn.LayerNorm(d_model, eps=eps).to(dtype)
    fc1 = nn.Linear(d_model, d_ff).to(dtype)
    fc2 = nn.Linear(d_ff, d_model).to(dtype)
    with torch.no_grad():
        for p in (*norm.parameters(), *fc1.parameters(), *fc2.parameters()):
            p.copy_(torch.randn(p.shape, generator=g, dtype=dtype) / max(1, p.shape[-1]) ** 0.5)
        norm.weight.add_(1.0)
    return norm, fc1, fc2


def unsplit_mlp(norm, fc1, fc2, x: torch.Tensor, residual: bool) -> torch.Tensor:
    """``fc2(gelu(fc1(x)))``, or ``x + fc2(gelu(fc1(norm(x))))`` with ``residual``."""
    if residual:
        return x + fc2(F.gelu(fc1(norm(x))))
    return fc2(F.gelu(fc1(x)))


def _inputs(shape: tuple, dtype: torch.dtype, seed: int):
    g = torch.Generator().manual_seed(seed + 1000)
    return torch.randn(shape, generator=g, dtype=dtype), torch.randn(
        shape, generator=g, dtype=dtype
    )


def saved_bytes(params) -> tuple:
    """A ``saved_tensors_hooks`` context and a counter: inside the context, every tensor autograd
    saves for backward is counted once (by storage, offset and shape), parameters excluded.

    Args:
        params: Tensors not to count (the module's parameters: they are held anyway).

    Returns:
        ``(context, counter)``; after the block ``counter["bytes"]`` holds the bytes saved.
    """
    skip = {p.untyped_storage().data_ptr() for p in params}  # nn.Parameters: plain storages
    counter = {"bytes": 0}
    seen: set = set()

    def pack(t: torch.Tensor):
        inner = t
        while hasattr(inner, "elem") and isinstance(inner.elem, torch.Tensor):
            inner = inner.elem  # a wrapper subclass (AsyncCollectiveTensor of a functional
            # collective): its own storage cannot be read; the tensor it wraps holds the data
        try:
            where = (inner.untyped_storage().data_ptr(), inner.storage_offset())
        except (RuntimeError, NotImplementedError):  # another subclass without a storage
            where = (id(t), 0)
        key = (*where, tuple(t.shape), t.dtype)
        if key[0] not in skip and key not in seen:
            seen.add(key)
            counter["bytes"] += t.numel() * t.element_size()
        return t

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), counter


def _sent(name: str, args: tuple):
    """What a collective operator sends from this rank, flattened: the all-reduced tensor, an
    all-gather's input (this rank's piece), a reduce-scatter's input (the whole tensor; a list
    form's pieces in order). The ``c10d::`` gather and scatter operators take (outputs, inputs,
    ...); the functional ones (input, ...)."""
    kind = collective_kind(name.removeprefix("c10d::"))
    functional = name.startswith("_c10d_functional::")
    source = args[1] if kind in ("all_gather", "reduce_scatter") and not functional else args[0]
    pieces = [t.detach().reshape(-1) for t in _tensors(source)]
    if not pieces:
        return None
    try:
        return torch.cat(pieces).clone()
    except (RuntimeError, TypeError):  # pieces of several dtypes: not one of this exercise's
        return None


class _SentTimeline(CommTimeline):
    """A :class:`CommTimeline` whose collective events also hold ``"sent"``: a copy of the data
    this rank sent (:func:`_sent`), taken before the collective runs."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = getattr(getattr(func, "_schema", None), "name", "")
        if not (name.startswith(("c10d::", "_c10d_functional::")) and args):
            return super().__torch_dispatch__(func, types, args, kwargs)
        try:
            sent = _sent(name, args)
        except (IndexError, RuntimeError, TypeError):  # an operator of another shape: not sent
            sent = None
        before = len(self.events)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if len(self.events) > before:
            self.events[before]["sent"] = sent
        return out


def _phases(events: list[dict]) -> dict[str, list[dict]]:
    """The collectives of a timeline, by phase: before the ``forward_end`` marker (forward) and
    between it and ``backward_end`` (backward)."""
    out: dict[str, list[dict]] = {"forward": [], "backward": []}
    phase = "forward"
    for e in events:
        if e["kind"] == "forward_end":
            phase = "backward"
        elif e["kind"] == "backward_end":
            break
        elif e["kind"] == "collective":
            out[phase].append(
                {"collective": e["collective"], "bytes": e["full_bytes"], "sent": e.get("sent")}
            )
    return out


#: Factors a rank multiplies its parameters by, in place, before the second run (as an optimizer
#: step changes them): rank r's shards by ``_shard_factor(r, world)``, the replicated parameters
#: (fc2.bias, the norm's) by ``_REPLICATED_FACTOR`` on every rank. A module that computes with
#: anything but its parameters (full weights kept in a closure, a buffer, a global) no longer
#: matches the unsplit MLP with the same changes.
_REPLICATED_FACTOR = 0.75


def _shard_factor(rank: int, world: int) -> float:
    return 1.0 + (rank + 1) / (2 * world)


def _storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors``: what they keep in memory (a slice
    without a copy keeps its whole base)."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = max(seen.get(storage.data_ptr(), 0), storage.nbytes())
    return sum(seen.values())


def _rank_run(
    rank, world_size, cls, sequence_parallel, d_model, d_ff, shape, dtype, seed, eps=1e-5
):
    """One rank: build the full layers, the student's module, run forward and backward of
    ``(out * weight).sum()`` under a timeline that keeps what each collective sent and a
    saved-tensor counter; then scale the module's parameters in place (:func:`_shard_factor`)
    and run forward and backward again."""
    norm, fc1, fc2 = full_layers(d_model, d_ff, seed, dtype, eps)
    x, weight = _inputs(shape, dtype, seed)
    if sequence_parallel:  # this rank's contiguous chunk of the sequence (dim 0)
        n = shape[0] // world_size
        x, weight = x[rank * n : (rank + 1) * n], weight[rank * n : (rank + 1) * n]
        module = cls(norm, fc1, fc2)
    else:
        module = cls(fc1, fc2)
    x0 = x
    x = x0.clone().requires_grad_(True)
    params = list(module.parameters())
    timeline = _SentTimeline()
    context, counter = saved_bytes(params)
    with timeline:
        with context:
            out = module(x)
        timeline.mark("forward_end")
        if isinstance(out, torch.Tensor) and out.shape == weight.shape:
            (out * weight).sum().backward()
        timeline.mark("backward_end")
    report = {
        "out": out.detach().clone() if isinstance(out, torch.Tensor) else repr(type(out)),
        "x_grad": None if x.grad is None else x.grad.clone(),
        "params": [
            {
                "name": name,
                "value": p.detach().clone(),
                "grad": None if p.grad is None else p.grad.clone(),
            }
            for name, p in module.named_parameters()
        ],
        "param_bytes": sum(p.numel() * p.element_size() for p in params)
        + sum(b.numel() * b.element_size() for b in module.buffers()),
        "storage_bytes": _storage_bytes([*params, *module.buffers()]),
        "saved_bytes": counter["bytes"],
        "comms": _phases(timeline.events),
        "out2": None,
        "x_grad2": None,
    }
    if not (isinstance(out, torch.Tensor) and out.shape == weight.shape):
        return report
    replicated = [fc2.bias, norm.weight, norm.bias] if sequence_parallel else [fc2.bias]
    with torch.no_grad():
        for p in params:
            same = any(_same(p.detach(), t.detach()) for t in replicated)
            p.mul_(_REPLICATED_FACTOR if same else _shard_factor(rank, world_size))
    x2 = x0.clone().requires_grad_(True)
    out2 = module(x2)
    if isinstance(out2, torch.Tensor) and out2.shape == weight.shape:
        (out2 * weight).sum().backward()
        report["out2"] = out2.detach().clone()
        report["x_grad2"] = None if x2.grad is None else x2.grad.clone()
    return report


def _probe(cls, world_size, sequence_parallel, d_model, d_ff, shape, dtype, seed, eps=1e-5) -> dict:
    """Probe: start ``world_size`` gloo ranks (course launcher, deadline) running
    :func:`_rank_run` with the student's class; hand back every rank's report, or the
    launcher's report of a failed rank."""
    warm_up_timeline()  # imports what a dispatch mode needs once, before the ranks fork
    try:
        results = run_ranks(
            _rank_run,
            world_size,
            cls,
            sequence_parallel,
            d_model,
            d_ff,
            shape,
            dtype,
            seed,
            eps,
            timeout_s=rank_deadline_s(world_size),
        )
    except Exception as exc:  # noqa: BLE001 - a rank failed, or the class could not be sent
        return {
            "failed": str(exc) if isinstance(exc, RanksFailed) else f"{type(exc).__name__}: {exc}"
        }
    return {"ranks": results}


def _tol(dtype: torch.dtype) -> float:
    return 1e-10 if dtype == torch.float64 else 2e-5


def _close(a, b: torch.Tensor, tol: float) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and a.shape == b.shape
        and a.dtype == b.dtype
        and bool(torch.allclose(a, b, atol=tol, rtol=tol))
    )


def _diff(a, b: torch.Tensor) -> str:
    if not isinstance(a, torch.Tensor):
        return f"{a!r}"
    if a.shape != b.shape:
        return f"shape {tuple(a.shape)}"
    if a.dtype != b.dtype:
        return f"dtype {a.dtype}"
    return f"largest difference {(a - b).abs().max().item():.3g}"


def _shards(rank: int, world: int, fc1: nn.Linear, fc2: nn.Linear, norm=None) -> dict:
    """What rank ``rank`` must hold: label -> (value, gradient, sharded), for the full layers
    after backward (their ``.grad`` set)."""
    n = fc1.out_features // world
    rows = slice(rank * n, (rank + 1) * n)
    out = {
        f"fc1.weight[{rows.start}:{rows.stop}, :]": (fc1.weight[rows], fc1.weight.grad[rows], 1),
        f"fc1.bias[{rows.start}:{rows.stop}]": (fc1.bias[rows], fc1.bias.grad[rows], 1),
        f"fc2.weight[:, {rows.start}:{rows.stop}]": (
            fc2.weight[:, rows],
            fc2.weight.grad[:, rows],
            1,
        ),
        "fc2.bias": (fc2.bias, fc2.bias.grad, 0),
    }
    if norm is not None:
        out["norm.weight"] = (norm.weight, norm.weight.grad, 0)
        out["norm.bias"] = (norm.bias, norm.bias.grad, 0)
    return {k: (v.detach(), g.detach(), s) for k, (v, g, s) in out.items()}


def _wrong_layouts(rank: int, world: int, fc1: nn.Linear, fc2: nn.Linear) -> dict:
    """Values a parameter takes in typical wrong splits: label -> (value, likely cause)."""
    d_model = fc1.in_features
    full = "every rank keeps the full weights: keep only this rank's shard as a parameter"
    out = {
        "fc1.weight (all of it)": (fc1.weight, full),
        "fc2.weight (all of it)": (fc2.weight, full),
        "fc1.bias (all of it)": (fc1.bias, full),
    }
    if d_model % world == 0:
        k = d_model // world
        cols = slice(rank * k, (rank + 1) * k)
        out["fc1.weight[:, shard] (split by input features)"] = (
            fc1.weight[:, cols],
            "fc1 is split by its input features; split it by its output features (rows of "
            "fc1.weight, and fc1.bias with them), so that GELU applies to whole hidden features",
        )
        out["fc2.weight[shard, :] (split by output features)"] = (
            fc2.weight[cols],
            "fc2 is split by its output features; split it by its input features (columns of "
            "fc2.weight), the hidden features this rank computed",
        )
    return {k: (v.detach(), c) for k, (v, c) in out.items()}


def _same(value: torch.Tensor, want: torch.Tensor) -> str | None:
    """How ``value`` holds ``want``: "as is", "transposed", or None."""
    if value.shape == want.shape and torch.equal(value, want):
        return "as is"
    if want.dim() == 2 and value.shape == want.T.shape and torch.equal(value, want.T):
        return "transposed"
    if value.numel() == want.numel() and torch.equal(value.reshape(-1), want.reshape(-1)):
        return "reshaped"
    return None


def _check_params(what, rank, world, params, fc1, fc2, norm, tol, sequence_parallel):
    """Match each of the student's parameters with a shard by value; compare gradients.
    Returns the matched labels -> gradient (as the full layer's layout)."""
    shards = _shards(rank, world, fc1, fc2, norm)
    wrong = _wrong_layouts(rank, world, fc1, fc2)
    matched: dict[str, torch.Tensor | None] = {}
    for p in params:
        value = p["value"]
        hit = next(
            (
                (label, _same(value, want))
                for label, (want, _, _) in shards.items()
                if _same(value, want)
            ),
            None,
        )
        if hit is None:
            bad = next(
                ((label, cause) for label, (w, cause) in wrong.items() if _same(value, w)), None
            )
            fail(
                f"{what}: rank {rank}: your parameter {p['name']!r} (shape {tuple(value.shape)})",
                yours=bad[0] if bad else "not a shard of fc1 or fc2 this rank should hold",
                expected=f"one of this rank's shards: {', '.join(shards)}",
                cause=bad[1]
                if bad
                else "rank r keeps rows r*n:(r+1)*n of fc1.weight and fc1.bias (n = d_ff / "
                "world size), the same columns of fc2.weight, and fc2.bias whole; copy them "
                "from the full layers (same values, e.g. .detach().clone() of a slice)",
            )
        label, how = hit
        grad = p["grad"]
        if grad is not None and how == "transposed":
            grad = grad.T
        elif grad is not None and how == "reshaped":
            grad = grad.reshape(shards[label][0].shape)
        matched[label] = grad
    # fc2.bias may live on some ranks only (added on one rank before the all-reduce is right
    # too); the checks require it on at least one rank (:func:`_require_bias_somewhere`).
    missing = [label for label in shards if label not in matched and label != "fc2.bias"]
    require(
        not missing,
        f"{what}: rank {rank}: the shards kept as parameters of your module",
        yours=[p["name"] for p in params],
        expected=f"every shard of this rank as an nn.Parameter: {', '.join(shards)}",
        cause="keep every shard as an nn.Parameter (a plain tensor attribute gets no "
        "gradient and is not seen by an optimizer); the norm stays whole (replicated)"
        if sequence_parallel
        else "keep every shard as an nn.Parameter (a plain tensor attribute gets no gradient "
        "and is not seen by an optimizer)",
    )
    return matched, shards


def _require_bias_somewhere(what: str, held: list[bool]) -> None:
    require(
        any(held),
        f"{what}: fc2.bias among your module's parameters",
        yours=f"on ranks {[r for r, h in enumerate(held) if h]}",
        expected="fc2.bias as a parameter (whole) on every rank, or at least on one",
        cause="keep fc2.bias as an nn.Parameter: it is trained too",
    )


def _grad_cause(got, want: torch.Tensor, world: int, tol: float, what_grad: str) -> str:
    if got is None:
        return (
            f"no gradient reached {what_grad}: the all-reduce of forward must be part of the "
            "graph (an autograd.Function whose backward passes the gradient on), not applied "
            "to a detached copy"
        )
    if isinstance(got, torch.Tensor) and got.shape == want.shape:
        if torch.allclose(got * world, want, atol=tol * 10, rtol=tol * 10):
            return "the gradient is divided by the world size: an all-reduce sums, do not average"
    return ""


def _check_comms(what, rank, comms, expected: dict, cause: dict) -> None:
    for phase in ("forward", "backward"):
        got = comms[phase]
        want = expected[phase]
        kinds = sorted(e["collective"] for e in got)
        ok = kinds == sorted(k for k, _ in want) and all(
            any(e["collective"] == k and e["bytes"] == b for e in got) for k, b in want
        )
        if isinstance(cause.get(phase), dict):  # alternatives accepted (kinds -> bytes)
            ok = ok or any(
                kinds == sorted(k for k, _ in alt)
                and all(any(e["collective"] == k and e["bytes"] == b for e in got) for k, b in alt)
                for alt in cause[phase].get("also", [])
            )
        shown = [f"{e['collective']} of {e['bytes']} bytes" for e in got] or "no collective"
        require(
            ok,
            f"{what}: rank {rank}: collectives in {phase} (recorded at the dispatcher)",
            yours=shown,
            expected=[f"{k} of {b} bytes" for k, b in want],
            cause=_comm_cause(phase, got, want, cause),
        )


def _comm_cause(phase, got, want, cause) -> str:
    kinds = [e["collective"] for e in got]
    extra = cause.get(phase, {}) if isinstance(cause.get(phase), dict) else {}
    if "all_gather" in kinds and all(k != "all_gather" for k, _ in want):
        return (
            "an extra all-gather: keep each rank's hidden features on that rank and multiply "
            "them by its columns of fc2.weight; the partial outputs then add up with one "
            "all-reduce"
        )
    if not got:
        return extra.get("none", f"no collective in {phase}")
    if "all_reduce" in kinds and all(k != "all_reduce" for k, _ in want):
        return extra.get(
            "all_reduce",
            "an all-reduce where a reduce-scatter (or all-gather) belongs: every rank then "
            "holds the whole sequence, and slicing it afterwards moves twice the bytes",
        )
    return extra.get("other", "one collective per operator, of the tensor's full size")


# --------------------------------------------------------------------------- what ranks compute
def _scaled_layers(d_model, d_ff, seed, dtype, world, eps=1e-5):
    """The full layers as the ranks changed them before the second run: rank j's rows of fc1
    and columns of fc2.weight times :func:`_shard_factor` (j), fc2.bias and the norm times
    :data:`_REPLICATED_FACTOR`."""
    norm, fc1, fc2 = full_layers(d_model, d_ff, seed, dtype, eps)
    n = d_ff // world
    with torch.no_grad():
        for j in range(world):
            rows = slice(j * n, (j + 1) * n)
            c = _shard_factor(j, world)
            fc1.weight[rows] *= c
            fc1.bias[rows] *= c
            fc2.weight[:, rows] *= c
        for t in (fc2.bias, norm.weight, norm.bias):
            t *= _REPLICATED_FACTOR
    return norm, fc1, fc2


def _partial(fc1, fc2, j: int, world: int, z: torch.Tensor) -> torch.Tensor:
    """Rank j's partial output ``fc2_j(gelu(fc1_j(z)))`` (no bias of fc2)."""
    n = fc1.out_features // world
    rows = slice(j * n, (j + 1) * n)
    w1, b1, w2 = fc1.weight.detach()[rows], fc1.bias.detach()[rows], fc2.weight.detach()[:, rows]
    return F.linear(F.gelu(F.linear(z, w1, b1)), w2)


def _partial_input_grad(fc1, fc2, j, world, z, grad_out) -> torch.Tensor:
    """Gradient of ``(partial_j(z) * grad_out).sum()`` with respect to z: what rank j's
    backward sends to be summed over the ranks."""
    z = z.detach().clone().requires_grad_(True)
    (_partial(fc1, fc2, j, world, z) * grad_out).sum().backward()
    return z.grad


def _sent_matches(sent, want: torch.Tensor, tol: float, bias=None) -> bool:
    """Whether a collective sent ``want`` (flattened), or ``want`` plus a multiple of ``bias``
    (fc2's bias added before the sum on some ranks, as the exercise allows)."""
    if not isinstance(sent, torch.Tensor) or sent.numel() != want.numel():
        return False
    sent = sent.reshape(want.shape).to(want.dtype)
    if bias is not None:
        b = bias.detach().expand_as(want)
        c = float((sent - want).mul(b).sum() / b.mul(b).sum())
        want = want + c * b
    return bool(torch.allclose(sent, want, atol=tol * 10, rtol=tol * 10))


def _sent_diff(sent, want: torch.Tensor) -> str:
    if not isinstance(sent, torch.Tensor):
        return "nothing recorded"
    if sent.numel() != want.numel():
        return f"{sent.numel()} numbers"
    sent = sent.reshape(want.shape).to(want.dtype)
    if not sent.abs().max() > 0:
        return "zeros"
    return f"largest difference {(sent - want).abs().max().item():.3g} from it"


_VIEW_CAUSE = (
    "a shard that is a view of a full weight (a slice, narrow or chunk of it, or of a clone of "
    "the whole weight) keeps the whole weight's storage in memory, so the rank holds the full "
    "layer: clone after slicing (weight.detach()[rows].clone())"
)

_SIDE_CHANNEL = (
    "the collective does not carry what this rank computed: the ranks' results must be combined "
    "by the collective itself. A collective of zeros (or of anything else) beside another way "
    "of exchanging data (a file, shared memory, a global tensor, a store) is not tensor "
    "parallelism, and cannot work across machines"
)


def _require_second_run(what, rank, r, want, want_grad, tol, chunk: str) -> None:
    """Require the output and input gradient of the run after the module's parameters were
    scaled in place (:func:`_shard_factor`) to equal ``want`` and ``want_grad``; ``chunk`` starts
    the expected text ("" or "chunk r of ")."""
    cause = (
        "your module does not compute with its parameters: after they changed in place (as an "
        "optimizer step changes them) its result did not follow. Keep no other copy of the "
        "weights (in a closure, a buffer, a global, a file): compute with this rank's shards "
        "and the collectives"
    )
    for label, got, wanted in (
        ("output", r["out2"], want),
        ("input's gradient", r["x_grad2"], want_grad),
    ):
        require(
            _close(got, wanted, tol),
            f"{what}: rank {rank}: {label} after every rank multiplied its parameters in place "
            f"(rank j's shards by 1 + (j+1)/(2·world), the replicated ones (fc2.bias, a norm) by "
            f"{_REPLICATED_FACTOR}) and ran forward and backward again",
            yours=_diff(got, wanted),
            expected=f"{chunk}the unsplit module's with the same changes (to {tol:g})",
            cause=cause,
        )


# --------------------------------------------------------------------------- ColumnRowMLP
def _check_column_row(cls, world, d_model, d_ff, shape, dtype, seed) -> None:
    what = (
        f"ColumnRowMLP(fc1, fc2) on {world} gloo ranks, Linear({d_model}, {d_ff}) -> GELU -> "
        f"Linear({d_ff}, {d_model}), x of shape {tuple(shape)} ({str(dtype).removeprefix('torch.')})"
    )
    seen = cls.probe(_probe, world, False, d_model, d_ff, shape, dtype, seed)
    if "failed" in seen:
        _ranks_failed(what, seen["failed"], "ColumnRowMLP")
    norm, fc1, fc2 = full_layers(d_model, d_ff, seed, dtype)
    x, weight = _inputs(shape, dtype, seed)
    x.requires_grad_(True)
    want = unsplit_mlp(norm, fc1, fc2, x, residual=False)
    (want * weight).sum().backward()
    want = want.detach()
    tol = _tol(dtype)
    nbytes = want.numel() * want.element_size()
    for rank, r in enumerate(seen["ranks"]):
        out = r["out"]
        cause = (
            "check the split: fc1 by output features (rows of its weight), GELU on the shard, "
            "fc2 by input features (columns), the partial outputs summed by one all-reduce, "
            "fc2's bias added once, after it"
        )
        if isinstance(out, torch.Tensor) and out.shape == want.shape:
            b2 = fc2.bias.detach()
            if torch.allclose(out * world, want, atol=tol * 10, rtol=tol * 10) or torch.allclose(
                out, (want - b2) / world + b2, atol=tol * 10, rtol=tol * 10
            ):
                cause = (
                    "the output is divided by the world size: the partial outputs of the "
                    "ranks add up to the full output, so sum them (all-reduce), do not average"
                )
            elif torch.allclose(out, want + (world - 1) * b2, atol=tol * 10, rtol=tol * 10):
                cause = (
                    "fc2's bias is added on every rank before the all-reduce, so the sum holds "
                    f"it {world} times: add it once, after the all-reduce"
                )
            elif torch.allclose(out, want - b2, atol=tol * 10, rtol=tol * 10):
                cause = "fc2's bias is missing: add it once, after the all-reduce"
        elif isinstance(out, torch.Tensor):
            cause = "return the full output, (..., d_model), the same on every rank"
        require(
            _close(out, want, tol),
            f"{what}: rank {rank}: output vs the unsplit fc2(gelu(fc1(x)))",
            yours=_diff(out, want),
            expected=f"equal (to {tol:g})",
            cause=cause,
        )
    for rank, r in enumerate(seen["ranks"]):
        matched, shards = _check_params(
            what, rank, world, r["params"], fc1, fc2, None, tol, sequence_parallel=False
        )
        full = sum(v.numel() * v.element_size() for v, _, _ in shards.values())
        require(
            r["param_bytes"] <= full + SMALL_BUFFER_BYTES,
            f"{what}: rank {rank}: bytes of parameters and buffers your module holds",
            yours=r["param_bytes"],
            expected=f"{full} (1/{world} of fc1 and of fc2.weight, and fc2.bias; up to "
            f"{SMALL_BUFFER_BYTES} more for small buffers)",
            cause="keep only this rank's shards: no copy of the full layers in the module",
        )
        require(
            r["storage_bytes"] <= full + SMALL_BUFFER_BYTES,
            f"{what}: rank {rank}: bytes of the storage behind your parameters and buffers",
            yours=r["storage_bytes"],
            expected=f"at most {full} + {SMALL_BUFFER_BYTES}, the bytes of this rank's shards",
            cause=_VIEW_CAUSE,
        )
    held: list[bool] = []
    for rank, r in enumerate(seen["ranks"]):
        g = r["x_grad"]
        cause = _grad_cause(g, x.grad, world, tol, "x")
        if not cause and isinstance(g, torch.Tensor) and g.shape == x.grad.shape:
            total = sum(
                rr["x_grad"] for rr in seen["ranks"] if isinstance(rr["x_grad"], torch.Tensor)
            )
            if torch.allclose(total, x.grad, atol=tol * 10, rtol=tol * 10):
                cause = (
                    "each rank holds only its part of x's gradient (they add up to the right "
                    "one): the operator f, identity in forward, must all-reduce the gradient "
                    "in backward"
                )
        require(
            _close(g, x.grad, tol),
            f"{what}: rank {rank}: gradient of x after backward of (out * w).sum()",
            yours=_diff(g, x.grad),
            expected=f"the unsplit module's x.grad on every rank (to {tol:g})",
            cause=cause
            or "x's gradient flows through fc1's shard on each rank: all-reduce "
            "it in backward (f), once",
        )
        matched, shards = _check_params(
            what, rank, world, r["params"], fc1, fc2, None, tol, sequence_parallel=False
        )
        held.append("fc2.bias" in matched)
        for label, (_, want_grad, _) in shards.items():
            if label not in matched:
                continue
            got = matched[label]
            require(
                _close(got, want_grad, tol),
                f"{what}: rank {rank}: gradient of your shard {label}",
                yours=_diff(got, want_grad),
                expected=f"the same slice of the unsplit module's gradient (to {tol:g})",
                cause=_grad_cause(got, want_grad, world, tol, label)
                or "the gradient of the output reaches every rank whole (the all-reduce's "
                "backward is the identity)",
            )
    _require_bias_somewhere(what, held)
    _, fc1s, fc2s = _scaled_layers(d_model, d_ff, seed, dtype, world)
    x2 = x.detach().clone().requires_grad_(True)
    want2 = unsplit_mlp(None, fc1s, fc2s, x2, residual=False)
    (want2 * weight).sum().backward()
    for rank, r in enumerate(seen["ranks"]):
        _require_second_run(what, rank, r, want2.detach(), x2.grad, tol, "")
    for rank, r in enumerate(seen["ranks"]):
        _check_comms(
            what,
            rank,
            r["comms"],
            {"forward": [("all_reduce", nbytes)], "backward": [("all_reduce", nbytes)]},
            {
                "forward": {
                    "none": "no all-reduce in forward: the ranks' partial outputs must be "
                    "summed (operator g)",
                    "other": "exactly one all-reduce in forward (g), of the output "
                    f"({nbytes} bytes): the partial outputs of fc2, summed once",
                },
                "backward": {
                    "none": "no all-reduce in backward: x's gradient must be summed over the "
                    "ranks (operator f: identity in forward, all-reduce in backward)",
                    "other": "exactly one all-reduce in backward (f), of x's gradient "
                    f"({nbytes} bytes); g's backward is the identity",
                },
            },
        )
    for rank, r in enumerate(seen["ranks"]):
        (forward,) = r["comms"]["forward"]
        partial = _partial(fc1, fc2, rank, world, x.detach())
        require(
            _sent_matches(forward["sent"], partial, tol, bias=fc2.bias),
            f"{what}: rank {rank}: what your forward all-reduce sent",
            yours=_sent_diff(forward["sent"], partial),
            expected="this rank's partial output fc2_shard(gelu(fc1_shard(x))) (fc2's bias "
            f"added or not), to {tol * 10:g}",
            cause=_SIDE_CHANNEL,
        )
        (backward,) = r["comms"]["backward"]
        grad = _partial_input_grad(fc1, fc2, rank, world, x, weight)
        require(
            _sent_matches(backward["sent"], grad, tol),
            f"{what}: rank {rank}: what your backward all-reduce sent",
            yours=_sent_diff(backward["sent"], grad),
            expected="this rank's part of x's gradient, through its shards of fc1 and fc2, "
            f"to {tol * 10:g}",
            cause=_SIDE_CHANNEL,
        )


def check_column_row_mlp(ColumnRowMLP) -> None:  # noqa: N803 - the exercise's class name
    """Two gloo ranks, float32, x of shape (2, 3, 16), Linear(16, 32) -> GELU -> Linear(32, 16):
    on every rank the output and x's gradient equal the unsplit module's, every parameter is a
    shard of this rank (any layout, transposed accepted) whose gradient is the same slice of the
    unsplit gradient, the parameters (and the storage behind them) hold 1/2 of fc1 and of
    fc2.weight, the timeline shows exactly one all-reduce in forward and one in backward, of the
    output's bytes, and nothing else, each sending this rank's partial result; after the
    parameters are scaled in place, output and x's gradient follow.

    Raises:
        CheckFailed: any of these differs, or a rank raised or hung.
    """
    cls = student(ColumnRowMLP, "ColumnRowMLP")
    _check_column_row(cls, 2, 16, 32, (2, 3, 16), torch.float32, seed=0)
    passed(
        "ColumnRowMLP: outputs and gradients equal the unsplit MLP's on both ranks, each rank "
        "holds half the weights, one all-reduce in forward and one in backward"
    )


def check_column_row_mlp_hidden(ColumnRowMLP) -> None:  # noqa: N803
    """Four ranks, float64 (tight tolerance), a 2-D input and other widths."""
    cls = student(ColumnRowMLP, "ColumnRowMLP")
    _check_column_row(cls, 4, 12, 24, (5, 12), torch.float64, seed=3)
    _check_column_row(cls, 2, 10, 12, (3, 2, 10), torch.float64, seed=5)
    passed("ColumnRowMLP: also on 4 ranks, in float64, with a 2-D input")


# --------------------------------------------------------------------------- SequenceParallelMLP
def sp_saved_bytes(s: int, b: int, d: int, d_ff: int, world: int, elt: int) -> dict:
    """Bytes a rank's forward saves for backward in the sequence-parallel MLP (the reference's
    layout: the norm's input, 1/world of the sequence; the gathered input of fc1; GELU's input
    and output, d_ff/world features), and in the same block without sequence parallelism (the
    norm on the whole sequence), without the norm's mean and 1/std (2 numbers a token).

    Returns:
        ``{"sp": bytes, "tp_only": bytes}``.
    """
    shared = elt * (s * b * d + 2 * s * b * d_ff // world)
    return {"sp": shared + elt * s * b * d // world, "tp_only": shared + elt * s * b * d}


def _check_sequence_parallel(cls, world, s, b, d_model, d_ff, dtype, seed, eps=1e-5) -> None:
    shape = (s, b, d_model)
    norm_text = f"LayerNorm({d_model})" if eps == 1e-5 else f"LayerNorm({d_model}, eps={eps:g})"
    what = (
        f"SequenceParallelMLP(norm, fc1, fc2) on {world} gloo ranks, {norm_text}, "
        f"Linear({d_model}, {d_ff}), Linear({d_ff}, {d_model}); sequence of {s} x batch {b}, "
        f"each rank given {s // world} positions ({str(dtype).removeprefix('torch.')})"
    )
    seen = cls.probe(_probe, world, True, d_model, d_ff, shape, dtype, seed, eps)
    if "failed" in seen:
        _ranks_failed(what, seen["failed"], "SequenceParallelMLP")
    norm, fc1, fc2 = full_layers(d_model, d_ff, seed, dtype, eps)
    x, weight = _inputs(shape, dtype, seed)
    x.requires_grad_(True)
    want_full = unsplit_mlp(norm, fc1, fc2, x, residual=True)
    (want_full * weight).sum().backward()
    want_full = want_full.detach()
    tol = _tol(dtype)
    n = s // world
    full_bytes = want_full.numel() * want_full.element_size()
    without_residual = want_full - x.detach()
    default_eps = None
    if eps != 1e-5:  # what a norm with LayerNorm's default eps gives
        plain = nn.LayerNorm(d_model).to(dtype)
        with torch.no_grad():
            plain.weight.copy_(norm.weight)
            plain.bias.copy_(norm.bias)
            default_eps = unsplit_mlp(plain, fc1, fc2, x.detach(), residual=True)
    for rank, r in enumerate(seen["ranks"]):
        out, want = r["out"], want_full[rank * n : (rank + 1) * n]
        cause = (
            "norm on this rank's chunk, all-gather along the sequence (dim 0), fc1's shard, "
            "GELU, fc2's shard, reduce-scatter along the sequence, then fc2's bias and the "
            "residual x_shard"
        )
        if isinstance(out, torch.Tensor):
            if out.shape == want_full.shape:
                cause = (
                    "you return the whole sequence: reduce-scatter fc2's partial outputs "
                    "along dim 0, so that each rank gets the sum for its own chunk"
                )
            elif (
                out.shape == want.shape
                and default_eps is not None
                and torch.allclose(out, default_eps[rank * n : (rank + 1) * n], atol=tol * 10)
            ):
                cause = (
                    f"your norm uses eps = 1e-5, not the given norm's eps ({eps:g}): apply the "
                    "norm you were given (self.norm(x_shard)), or pass norm.eps to F.layer_norm"
                )
            elif out.shape == want.shape:
                others = [
                    j
                    for j in range(world)
                    if j != rank
                    and torch.allclose(out, want_full[j * n : (j + 1) * n], atol=tol * 10)
                ]
                if others:
                    cause = (
                        f"rank {rank} returns rank {others[0]}'s chunk: rank r's chunk is "
                        "positions r*s/world:(r+1)*s/world of the sequence (the order of "
                        "all_gather_into_tensor and reduce_scatter_tensor)"
                    )
                elif torch.allclose(
                    out, without_residual[rank * n : (rank + 1) * n], atol=tol * 10
                ):
                    cause = "the residual is missing: return x_shard + the MLP's output"
                else:
                    mine = x.detach()[rank * n : (rank + 1) * n]
                    swapped = [
                        j
                        for j in range(world)
                        if j != rank
                        and torch.allclose(
                            out, mine + without_residual[j * n : (j + 1) * n], atol=tol * 10
                        )
                    ]
                    if swapped:
                        cause = (
                            f"rank {rank} gets the MLP's output for rank {swapped[0]}'s "
                            "positions: the reduce-scatter must give rank r the sum of chunk r "
                            "(positions r*s/world:(r+1)*s/world, dim 0), the chunk its x_shard "
                            "holds"
                        )
        require(
            _close(out, want, tol),
            f"{what}: rank {rank}: output vs chunk {rank} of the unsplit x + fc2(gelu(fc1("
            "norm(x))))",
            yours=_diff(out, want),
            expected=f"equal, shape {tuple(want.shape)} (to {tol:g})",
            cause=cause,
        )
    for rank, r in enumerate(seen["ranks"]):
        g, want = r["x_grad"], x.grad[rank * n : (rank + 1) * n]
        require(
            _close(g, want, tol),
            f"{what}: rank {rank}: gradient of x_shard after backward of (out * w).sum()",
            yours=_diff(g, want),
            expected=f"chunk {rank} of the unsplit module's x.grad (to {tol:g})",
            cause=_grad_cause(g, want, world, tol, "x_shard")
            or "the all-gather's backward is a reduce-scatter (each rank's chunk of the summed "
            "gradient), the reduce-scatter's backward an all-gather",
        )
    replicated = {}
    for rank, r in enumerate(seen["ranks"]):
        matched, shards = _check_params(
            what, rank, world, r["params"], fc1, fc2, norm, tol, sequence_parallel=True
        )
        for label, (_, want_grad, sharded) in shards.items():
            if label not in matched:
                continue
            got = matched[label]
            if not sharded:
                replicated.setdefault(label, []).append(got)
                continue
            require(
                _close(got, want_grad, tol),
                f"{what}: rank {rank}: gradient of your shard {label}",
                yours=_diff(got, want_grad),
                expected=f"the same slice of the unsplit module's gradient (to {tol:g})",
                cause=_grad_cause(got, want_grad, world, tol, label)
                or "fc1 and fc2 see the whole sequence (gathered), so their shards' gradients "
                "are the unsplit ones",
            )
        full = sum(v.numel() * v.element_size() for v, _, _ in shards.values())
        require(
            r["param_bytes"] <= full + SMALL_BUFFER_BYTES,
            f"{what}: rank {rank}: bytes of parameters and buffers your module holds",
            yours=r["param_bytes"],
            expected=f"{full} (1/{world} of fc1 and of fc2.weight; fc2.bias and the norm whole; "
            f"up to {SMALL_BUFFER_BYTES} more for small buffers)",
            cause="keep only this rank's shards of fc1 and fc2",
        )
        require(
            r["storage_bytes"] <= full + SMALL_BUFFER_BYTES,
            f"{what}: rank {rank}: bytes of the storage behind your parameters and buffers",
            yours=r["storage_bytes"],
            expected=f"at most {full} + {SMALL_BUFFER_BYTES}, the bytes of this rank's shards and "
            "the norm",
            cause=_VIEW_CAUSE,
        )
    _require_bias_somewhere(what, [len(replicated.get("fc2.bias", [])) > 0])
    for label, grads in replicated.items():
        _, want_grad, _ = _shards(0, world, fc1, fc2, norm)[label]
        ok = all(isinstance(gr, torch.Tensor) and gr.shape == want_grad.shape for gr in grads)
        total = sum(grads) if ok else None
        require(
            ok and _close(total, want_grad, tol),
            f"{what}: {label}'s gradients (replicated), summed over the ranks that hold it",
            yours=_diff(total, want_grad) if ok else [None if gr is None else "?" for gr in grads],
            expected=f"the unsplit module's gradient of {label} (to {tol:g})",
            cause="each rank's gradient of a replicated parameter in the sequence-parallel "
            "region covers its own chunk of the sequence only; leave it so (do not all-reduce "
            "it in the module: the optimizer step sums them, as Megatron-LM does)"
            if ok and torch.allclose(total, world * want_grad, atol=tol * 10, rtol=tol * 10)
            else "apply the norm to this rank's chunk (the module you were given), and add "
            "fc2's bias after the reduce-scatter, to this rank's chunk",
        )
    norm_s, fc1_s, fc2_s = _scaled_layers(d_model, d_ff, seed, dtype, world, eps)
    x2 = x.detach().clone().requires_grad_(True)
    want2 = unsplit_mlp(norm_s, fc1_s, fc2_s, x2, residual=True)
    (want2 * weight).sum().backward()
    want2 = want2.detach()
    for rank, r in enumerate(seen["ranks"]):
        chunk = slice(rank * n, (rank + 1) * n)
        _require_second_run(what, rank, r, want2[chunk], x2.grad[chunk], tol, f"chunk {rank} of ")
    elt = want_full.element_size()
    budget = sp_saved_bytes(s, b, d_model, d_ff, world, elt)
    limit = (budget["sp"] + budget["tp_only"]) // 2
    for rank, r in enumerate(seen["ranks"]):
        require(
            r["saved_bytes"] <= limit,
            f"{what}: rank {rank}: bytes autograd saved for backward in your forward "
            "(saved_tensors_hooks, parameters excluded)",
            yours=r["saved_bytes"],
            expected=f"at most {limit}: about {budget['sp']} (the norm's input is 1/{world} of "
            f"the sequence, {elt * s * b * d_model // world} bytes; the gathered input of fc1 "
            f"{elt * s * b * d_model}; GELU's input and output "
            f"{2 * elt * s * b * d_ff // world}); without sequence parallelism "
            f"{budget['tp_only']}",
            cause="the norm runs on the whole sequence: apply it to this rank's chunk, before "
            "the all-gather, so its activations are 1/world of the sequence",
        )
    for rank, r in enumerate(seen["ranks"]):
        _check_comms(
            what,
            rank,
            r["comms"],
            {
                "forward": [("all_gather", full_bytes), ("reduce_scatter", full_bytes)],
                "backward": [("all_gather", full_bytes), ("reduce_scatter", full_bytes)],
            },
            {
                "forward": {
                    "all_reduce": "an all-reduce where the reduce-scatter belongs (then sliced): "
                    "right values, but every rank receives the whole sequence, twice the bytes "
                    "of a reduce-scatter",
                    "other": "exactly one all-gather before fc1 (the whole sequence, "
                    f"{full_bytes} bytes gathered) and one reduce-scatter after fc2",
                },
                "backward": {
                    "also": [
                        [
                            ("all_gather", full_bytes),
                            ("all_gather", full_bytes),
                            ("reduce_scatter", full_bytes),
                        ]
                    ],
                    "all_reduce": "an all-reduce in backward: the all-gather's backward is a "
                    "reduce-scatter and the reduce-scatter's an all-gather (and the replicated "
                    "parameters' gradients are not all-reduced in the module)",
                    "other": "in backward, the conjugates: one reduce-scatter (the all-gather's "
                    "backward) and one all-gather (the reduce-scatter's backward)",
                },
            },
        )
    normed = norm(x.detach()).detach()  # the norm of the whole sequence, (s, b, d_model)
    for rank, r in enumerate(seen["ranks"]):
        chunk = slice(rank * n, (rank + 1) * n)
        sent = {
            phase: {
                kind: [e["sent"] for e in r["comms"][phase] if e["collective"] == kind]
                for kind in ("all_gather", "reduce_scatter")
            }
            for phase in ("forward", "backward")
        }
        expected = [
            (
                "forward",
                "all_gather",
                normed[chunk],
                None,
                "the norm of this rank's chunk, norm(x_shard)",
            ),
            (
                "forward",
                "reduce_scatter",
                _partial(fc1, fc2, rank, world, normed),
                fc2.bias,
                "this rank's partial output over the whole sequence, "
                "fc2_shard(gelu(fc1_shard(norm(x)))) (fc2's bias added or not)",
            ),
            (
                "backward",
                "all_gather",
                weight[chunk],
                None,
                "the gradient of this rank's output chunk (the reduce-scatter's backward)",
            ),
            (
                "backward",
                "reduce_scatter",
                _partial_input_grad(fc1, fc2, rank, world, normed, weight),
                None,
                "this rank's part of the gradient of the gathered norm(x), through its shards",
            ),
        ]
        for phase, kind, want_sent, bias, text in expected:
            got = sent[phase][kind]
            # backward may re-gather norm(x_shard) too (Megatron): any one all-gather may match
            ok = any(_sent_matches(g, want_sent, tol, bias=bias) for g in got)
            if ok and phase == "backward" and kind == "all_gather":
                ok = all(
                    _sent_matches(g, want_sent, tol) or _sent_matches(g, normed[chunk], tol)
                    for g in got
                )
            require(
                ok,
                f"{what}: rank {rank}: what your {kind.replace('_', '-')} in {phase} sent",
                yours=[_sent_diff(g, want_sent) for g in got],
                expected=f"{text}, to {tol * 10:g}",
                cause=(
                    "the norm runs after the all-gather: apply it to this rank's chunk, then "
                    "gather norm(x_shard)"
                    if phase == "forward"
                    and kind == "all_gather"
                    and any(_sent_matches(g, x.detach()[chunk], tol) for g in got)
                    else _SIDE_CHANNEL
                ),
            )


def check_sequence_parallel_mlp(SequenceParallelMLP) -> None:  # noqa: N803
    """Two gloo ranks, float32, a sequence of 8 positions x batch 2 x d_model 16, d_ff 32: each
    rank's output and x_shard's gradient equal its chunk of the unsplit block's, its shards'
    gradients equal the unsplit slices, the replicated parameters' (norm, fc2.bias) gradients
    sum over the ranks to the unsplit ones, the bytes saved for backward are those of a norm on
    1/2 of the sequence, and the timeline shows one all-gather and one reduce-scatter in forward
    and in backward (a second all-gather in backward accepted), no all-reduce, each sending what
    this rank computed; the shards are copies and, once scaled in place, the module's output and
    input gradient follow.

    Raises:
        CheckFailed: any of these differs, or a rank raised or hung.
    """
    cls = student(SequenceParallelMLP, "SequenceParallelMLP")
    _check_sequence_parallel(cls, 2, 8, 2, 16, 32, torch.float32, seed=1)
    passed(
        "SequenceParallelMLP: each rank's chunk and gradients equal the unsplit block's, the "
        "norm's activations are half the sequence, all-gather + reduce-scatter (no all-reduce)"
    )


def check_sequence_parallel_mlp_hidden(SequenceParallelMLP) -> None:  # noqa: N803
    """Four ranks in float64, and two ranks with another shape and a norm whose eps is 1e-2 (the
    norm given must be used as it is, eps included)."""
    cls = student(SequenceParallelMLP, "SequenceParallelMLP")
    _check_sequence_parallel(cls, 4, 8, 3, 12, 24, torch.float64, seed=2)
    _check_sequence_parallel(cls, 2, 6, 1, 10, 12, torch.float64, seed=6, eps=1e-2)
    passed("SequenceParallelMLP: also on 4 ranks, in float64, with other shapes")
