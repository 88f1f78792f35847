"""Collectives as a rank sees them: :class:`CommTimeline` records every collective a process
starts, at PyTorch's dispatcher (the ``c10d::`` operator the process group runs, whatever Python
function called it: ``dist.all_reduce``, a functional collective, DTensor's redistribution), with
its bytes and, on request, when its work completed; course code adds markers to the same list.

Used by the checks of 11_scaling and 13_parallelism and by their notebooks' demos (moved here
from ``grader.checks.ch11_scaling``, which re-exports the names). Events are plain dicts, so a
rank hands its timeline back to the grading process as plain data.

May import: the standard library and torch (a runtime module: never :mod:`grader.checks`).
"""

from __future__ import annotations

import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "CommTimeline",
    "collective_kind",
    "collectives",
    "is_all_reduce",
    "warm_up_timeline",
]


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)


class CommTimeline(TorchDispatchMode):
    """A per-rank timeline: every collective this process starts (seen at PyTorch's dispatcher,
    as the ``c10d::`` operator the process group runs, whatever Python function called it), and
    markers set by course code (``mark``), in order, with ``time.perf_counter_ns`` stamps.

    Events are plain dicts: ``{"kind": "collective", "op": "allreduce_", "bytes": 4096,
    "t_ns": ..., "collective": "all_reduce", "full_bytes": 4096}`` or ``{"kind": <marker>,
    "t_ns": ..., ...}``. ``op`` is the operator's name (``allreduce_``, ``_allgather_base_``,
    ``_c10d_functional::all_gather_into_tensor``, ...), ``collective`` what it does
    (:func:`collective_kind`: ``"all_reduce"``, ``"all_gather"``, ``"reduce_scatter"``, ...), and
    ``full_bytes`` the bytes of the whole (unsharded) tensor it works on, however the operator
    takes its arguments: the all-reduced tensor, the gathered output of an all-gather, the input
    of a reduce-scatter. ``bytes`` counts the tensors of
    the operator's first argument (the input of an all-reduce; the output list or tensor of an
    all-gather, the output of a reduce-scatter, that is the first argument of their ``c10d::``
    schemas). With ``completions=True`` a collective's event also gets ``"done_ns"``: when its
    work completed (a callback on the ``Work``'s future, run by the process group when the
    collective is over on this rank, whether or not anyone waits for it), absent while it has
    not.
    """

    def __init__(self, completions: bool = False) -> None:
        super().__init__()
        self.events: list[dict] = []
        self.completions = completions

    def mark(self, kind: str, **info) -> None:
        """Append a marker (``"grad"`` with the parameter's name, ``"backward_end"``, ...)."""
        self.events.append({"kind": kind, "t_ns": time.perf_counter_ns(), **info})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        schema = getattr(func, "_schema", None)
        name = getattr(schema, "name", "")
        functional = name.startswith("_c10d_functional::")
        # A functional collective runs its process group's work itself, not through c10d::
        # operators; its wait_tensor and autograd wrapper are no collectives.
        if not (name.startswith("c10d::") or (functional and collective_kind(name) != name)):
            return func(*args, **(kwargs or {}))
        nbytes = sum(t.numel() * t.element_size() for t in _tensors(args[0] if args else ()))
        op = name.removeprefix("c10d::")
        self.mark(
            "collective",
            op=op,
            bytes=nbytes,
            async_op=_argument(schema, "async_op", args, kwargs or {}),
            collective=collective_kind(op),
            full_bytes=_full_bytes(op, args, nbytes),
        )
        event = self.events[-1]
        out = func(*args, **(kwargs or {}))
        if self.completions:
            _stamp_completion(out, event)
        return out


def _stamp_completion(out, event: dict) -> None:
    """Set ``event["done_ns"]`` when the work a ``c10d::`` operator returned completes. The
    operator returns its ``Work`` as a TorchScript object; ``Work.unbox`` gives the Python
    ``Work`` whose future the process group completes (gloo: its worker thread; NCCL: when the
    kernel has run). Left unset where this torch has no such API."""
    work = out[-1] if isinstance(out, (tuple, list)) and out else out
    try:
        from torch._C._distributed_c10d import Work

        future = Work.unbox(work).get_future()
    except Exception:  # noqa: BLE001 - an operator without a Work, or an older torch
        return

    def done(_future) -> None:
        event["done_ns"] = time.perf_counter_ns()

    future.add_done_callback(done)


def _argument(schema, name: str, args: tuple, kwargs: dict):
    """The value of argument ``name`` of an operator call, or None when the operator has no
    such argument (``async_op`` is in the ``c10d::`` schemas of recent PyTorch versions only)."""
    for i, argument in enumerate(schema.arguments):
        if argument.name == name:
            if name in kwargs:
                return kwargs[name]
            if i < len(args):
                return args[i]
            return argument.default_value
    return None


_KINDS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "broadcast": "broadcast",
    "alltoall": "all_to_all",
    "barrier": "barrier",
    "send": "send",
    "recv": "recv",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
}


def collective_kind(op: str) -> str:
    """What a ``c10d::`` or ``_c10d_functional::`` operator does: ``"all_reduce"``,
    ``"all_gather"``, ``"reduce_scatter"``, ``"broadcast"``, ``"all_to_all"``, ... (the operator's
    name without underscores and suffixes; the name itself where none is known)."""
    bare = op.removeprefix("_c10d_functional::").replace("_", "").lower()
    bare = bare.removeprefix("c10d::")
    for prefix in sorted(_KINDS, key=len, reverse=True):
        if bare.startswith(prefix):
            return _KINDS[prefix]
    return op


def _nbytes(obj) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(obj))


def _full_bytes(op: str, args: tuple, first: int) -> int:
    """Bytes of the whole tensor a gather or scatter works on (see :class:`CommTimeline`)."""
    kind = collective_kind(op)
    functional = op.startswith("_c10d_functional::")
    try:
        if kind == "all_gather" and functional:  # (input shard, group_size, group_name)
            return _nbytes(args[0]) * int(args[1])
        if kind == "reduce_scatter" and not functional:  # (outputs, inputs, ...)
            return _nbytes(args[1])
    except (IndexError, TypeError, ValueError):
        return first
    return first


def warm_up_timeline() -> None:
    """Enter a :class:`CommTimeline` once in this process. The first dispatch mode of a process
    imports ``torch._dynamo`` (about 5 s); done before ranks are forked, they inherit it instead
    of each importing it inside their deadline."""
    with CommTimeline():
        torch.ones(1).add(1)


def is_all_reduce(event: dict) -> bool:
    """Whether a timeline event is an all-reduce (``allreduce_``, ``allreduce_coalesced_``,
    or the functional ``_c10d_functional::all_reduce``)."""
    return event["kind"] == "collective" and collective_kind(event["op"]) == "all_reduce"


def collectives(events: list[dict]) -> list[dict]:
    """The collective events of a timeline, in order."""
    return [e for e in events if e["kind"] == "collective"]
