"""Checks for 01_devices: pick_device, to_device, seed_everything, visible_gpus.

Each ``check_*`` takes the student's object and raises :class:`~grader.checks.common.CheckFailed`
with a teaching message when it misbehaves. The checks reach the student's code through a
:class:`~grader.runtime.remote.Handle` (:mod:`grader.runtime.remote`): calls and the ``_probe_*`` functions
below run where the student's code lives (under autograde, in their kernel) and hand back plain
data; every comparison is made here. ``check_*_cuda`` need a real GPU; the others run on the
CPU, using :func:`grader.runtime.simulate.simulated_cuda` (inside probes) to play a machine with GPUs
where the behaviour under test depends on having one.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import random
import re
from pathlib import Path

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from grader.checks.common import (
    call_student,
    cuda_or_not_checked,
    expect_raises,
    fail,
    passed,
    require,
)
from grader.runtime.course import reference
from grader.runtime.remote import Recorded, attempt, attempt_all, student
from grader.runtime.simulate import simulated_cuda

ASSIGNMENT = "01_devices"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True


# --------------------------------------------------------------------------- pick_device
def _require_device(value, expected: torch.device, call: str, cause: str) -> None:
    require(
        isinstance(value, torch.device),
        f"{call} must return a torch.device",
        yours=f"{value!r} ({type(value).__name__})",
        expected=expected,
        cause="return torch.device(...) rather than a string",
    )
    require(
        value == expected,
        f"{call} returned the wrong device",
        yours=value,
        expected=expected,
        cause=cause,
    )


def _pick_calls(count: int) -> list:
    """The calls the checks make on a machine with ``count`` GPUs: (args, kwargs) pairs. The
    missing indices are ``count`` (the first past the end: an answer that compares with
    ``<= device_count()`` accepts it) and ``count + 2``; ``"cuda"`` without an index is the
    current GPU (cuda:0: the checks never change it)."""
    return [
        ((), {}),
        (("cpu",), {}),
        ((f"cuda:{count - 1}",), {}),
        (("cuda",), {}),
        ((f"cuda:{count}",), {}),
        ((f"cuda:{count + 2}",), {}),
    ]


def _probe_pick_device_simulated(pick_device, count: int, calls: list) -> list:
    """Probe: the calls of :func:`_pick_calls` on a simulated machine with ``count`` GPUs."""
    with simulated_cuda(device_count=count, allow_real_gpu=True):
        return attempt_all(pick_device, calls)


def _check_pick_device_with_gpus(pick_device, count: int, label: str) -> None:
    _require_device(
        call_student(pick_device),
        torch.device("cuda:0"),
        f"pick_device() on {label} with {count} GPU(s)",
        "prefer CUDA, and give the index explicitly: torch.device('cuda:0'), not torch.device('cuda')",
    )
    _require_device(
        call_student(pick_device, "cpu"),
        torch.device("cpu"),
        f"pick_device('cpu') on {label} with {count} GPU(s)",
        "do not ignore `preferred` when it is given",
    )
    last = f"cuda:{count - 1}"
    _require_device(
        call_student(pick_device, last),
        torch.device(last),
        f"pick_device({last!r}) on {label} with {count} GPU(s)",
        "a CUDA index below device_count() exists",
    )
    _require_device(
        call_student(pick_device, "cuda"),
        torch.device("cuda:0"),
        f"pick_device('cuda') on {label} with {count} GPU(s)",
        "'cuda' without an index means the current GPU: return it with its index, "
        "torch.device('cuda', torch.cuda.current_device()) (cuda:0 here), not torch.device('cuda')",
    )
    expect_raises(
        ValueError,
        pick_device,
        f"cuda:{count}",
        what=f"pick_device('cuda:{count}') on {label} with {count} GPU(s) must raise ValueError "
        f"(the GPUs are cuda:0 to cuda:{count - 1})",
        cause="an off-by-one: indices run from 0 to device_count() - 1, so accept an index only "
        "when index < torch.cuda.device_count() (not <=)",
    )
    missing = f"cuda:{count + 2}"
    err = expect_raises(
        ValueError,
        pick_device,
        missing,
        what=f"pick_device({missing!r}) on {label} with {count} GPU(s) must raise ValueError",
        cause="compare the index with torch.cuda.device_count(): indices run from 0 to count-1",
    )
    require(
        "cuda:0" in str(err),
        "the ValueError should name the available devices",
        yours=str(err),
        expected="a message listing e.g. 'cuda:0' and 'cpu'",
        cause="include the list of available devices in the message",
    )


def _probe_mps(_pick_device) -> bool:
    """Probe: whether the student's process has an Apple GPU."""
    return bool(torch.backends.mps.is_available())


def check_pick_device(pick_device) -> None:
    """Check pick_device on this machine, and without a GPU on simulated 1- and 2-GPU machines.

    Raises:
        CheckFailed: a returned value is not the expected ``torch.device``, or a device
            that does not exist is accepted.
    """
    pick_device = student(pick_device, "pick_device")
    _require_device(
        call_student(pick_device, "cpu"),
        torch.device("cpu"),
        "pick_device('cpu')",
        "return the preferred device when it exists",
    )
    has_mps = pick_device.probe(_probe_mps)
    if not has_mps:
        expect_raises(
            ValueError,
            pick_device,
            "mps",
            what="pick_device('mps') on a machine without an Apple GPU must raise ValueError",
            cause="check every preferred device, not only CUDA indices: 'mps' exists only where "
            "torch.backends.mps.is_available() is True",
        )
    if torch.cuda.is_available():
        _check_pick_device_with_gpus(pick_device, torch.cuda.device_count(), "this machine")
    else:
        err = expect_raises(
            ValueError,
            pick_device,
            "cuda:0",
            what="pick_device('cuda:0') on a machine without a GPU must raise ValueError",
            cause="check that the preferred device exists (torch.cuda.device_count()) before returning it",
        )
        require(
            "cpu" in str(err),
            "the ValueError should name the available devices",
            yours=str(err),
            expected="a message listing e.g. 'cpu'",
            cause="include the list of available devices in the message",
        )
        if not has_mps:
            _require_device(
                call_student(pick_device),
                torch.device("cpu"),
                "pick_device() without a GPU",
                "fall back to the CPU when neither CUDA nor MPS is available",
            )
        for count in (1, 2):
            calls = _pick_calls(count)
            records = pick_device.probe(_probe_pick_device_simulated, count, calls)
            _check_pick_device_with_gpus(
                Recorded("pick_device", calls, records), count, "a (simulated) machine"
            )
    passed(
        "pick_device returns torch.device objects, prefers cuda:0, honours `preferred` and rejects missing devices"
    )


def check_pick_device_cuda(pick_device) -> None:
    """Check pick_device on a real CUDA machine against the reference.

    Raises:
        CheckFailed: differs from the reference.
        NotCheckedWithoutCuda: in grading mode without a GPU.
    """
    if not cuda_or_not_checked("pick_device on a real CUDA machine"):
        return
    pick_device = student(pick_device, "pick_device")
    ref = reference(ASSIGNMENT).pick_device
    _require_device(
        call_student(pick_device),
        ref(),
        "pick_device() on this GPU machine",
        "prefer CUDA with an explicit index",
    )
    for i in range(torch.cuda.device_count()):
        _require_device(
            call_student(pick_device, f"cuda:{i}"),
            torch.device(f"cuda:{i}"),
            f"pick_device('cuda:{i}')",
            "an index below device_count() exists",
        )
    missing = f"cuda:{torch.cuda.device_count()}"
    expect_raises(
        ValueError,
        pick_device,
        missing,
        what=f"pick_device({missing!r}) must raise ValueError",
        cause="compare the index with torch.cuda.device_count()",
    )
    passed("pick_device agrees with the reference on this GPU machine")


# --------------------------------------------------------------------------- to_device
Point = collections.namedtuple("Point", ["x", "y"])


class _ToRecorder(TorchFunctionMode):
    """Records whether each tensor move was asked to be non-blocking."""

    def __init__(self):
        super().__init__()
        self.moves: list[bool] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in ("to", "cuda", "copy_"):
            flag = kwargs.get("non_blocking", False) is True or any(a is True for a in args[1:])
            self.moves.append(flag)
        return func(*args, **kwargs)


def _sample_batch() -> dict:
    g = torch.Generator().manual_seed(0)
    t = [torch.randn(2, 3, generator=g) for _ in range(6)]
    return {
        "image": t[0],
        "pair": (t[1], 3),
        "items": [t[2], "label", None, 2.5],
        "point": Point(t[3], t[4]),
        "nested": {"deep": [Point(t[5], "tag")], "count": 7},
    }


def _hidden_cases() -> list:
    return [
        [],
        (),
        {},
        torch.arange(3),
        [[torch.ones(1)], ((torch.zeros(2),),)],
        {"a": {"b": {"c": (1, torch.eye(2), Point("x", [torch.ones(1)]))}}},
        collections.OrderedDict(first=torch.ones(1), second=[2, "b"]),
    ]


def _type_name(obj) -> str:
    kind = type(obj)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def describe(obj, depth: int = 0) -> dict:
    """A nested structure as plain data: containers with their exact types, tensors by device,
    shape and dtype, other leaves by type, ``repr`` and identity (``id``, meaningful while the
    object lives). Runs where the structure lives (inside probes)."""
    if depth > 20:
        return {"kind": "leaf", "type": _type_name(obj), "repr": "...", "id": id(obj)}
    if isinstance(obj, torch.Tensor):
        return {
            "kind": "tensor",
            "type": _type_name(obj),
            "device": str(obj.device),
            "shape": tuple(obj.shape),
            "dtype": obj.dtype,
        }
    if isinstance(obj, dict):
        return {
            "kind": "dict",
            "type": _type_name(obj),
            "keys": [repr(k) for k in obj],
            "values": [describe(v, depth + 1) for v in obj.values()],
        }
    if isinstance(obj, (list, tuple)):
        return {
            "kind": "seq",
            "type": _type_name(obj),
            "namedtuple": isinstance(obj, tuple) and hasattr(obj, "_fields"),
            "items": [describe(v, depth + 1) for v in obj],
        }
    try:
        text = " ".join(repr(obj).split())[:80]
    except Exception:  # noqa: BLE001 - a student's __repr__ may raise
        text = "<unprintable>"
    return {"kind": "leaf", "type": _type_name(obj), "repr": text, "id": id(obj)}


def _moved(desc: dict, device: str) -> dict:
    """What ``desc`` should look like after moving every tensor to ``device``."""
    if desc["kind"] == "tensor":
        return {**desc, "device": device}
    if desc["kind"] == "dict":
        return {**desc, "values": [_moved(v, device) for v in desc["values"]]}
    if desc["kind"] == "seq":
        return {**desc, "items": [_moved(v, device) for v in desc["items"]]}
    return desc


def _compare_structure(got: dict, expected: dict, path: str = "batch", *, ids: bool = True) -> None:
    """Compare a description of the student's result with the expected one (see
    :func:`describe`); ``ids`` also requires leaves that are not tensors to be the very
    objects of the input."""
    require(
        got["type"] == expected["type"],
        f"{path} changed its container type",
        yours=got["type"],
        expected=expected["type"],
        cause="rebuild each container with its own type; a namedtuple needs type(obj)(*fields), not tuple(...)"
        if expected.get("namedtuple")
        else "rebuild each container with the same type as the input",
    )
    if expected["kind"] == "tensor":
        require(
            torch.device(got["device"]).type == torch.device(expected["device"]).type,
            f"{path} is not on the target device",
            yours=got["device"],
            expected=expected["device"],
            cause="call .to(device) on every tensor leaf",
        )
        require(
            got["shape"] == expected["shape"] and got["dtype"] == expected["dtype"],
            f"{path} changed shape or dtype",
            yours=(got["shape"], got["dtype"]),
            expected=(expected["shape"], expected["dtype"]),
            cause="only move tensors; do not reshape or cast them",
        )
    elif expected["kind"] == "dict":
        require(
            got["keys"] == expected["keys"],
            f"{path} has different keys",
            yours=got["keys"],
            expected=expected["keys"],
            cause="keep every key, in order",
        )
        for key, a, b in zip(expected["keys"], got["values"], expected["values"]):
            _compare_structure(a, b, f"{path}[{key}]", ids=ids)
    elif expected["kind"] == "seq":
        require(
            len(got["items"]) == len(expected["items"]),
            f"{path} has a different length",
            yours=len(got["items"]),
            expected=len(expected["items"]),
            cause="keep every element",
        )
        for i, (a, b) in enumerate(zip(got["items"], expected["items"])):
            _compare_structure(a, b, f"{path}[{i}]", ids=ids)
    else:
        require(
            got["kind"] == "leaf"
            and got["repr"] == expected["repr"]
            and (not ids or got["id"] == expected["id"]),
            f"{path} (not a tensor) was changed",
            yours=got.get("repr", got["kind"]),
            expected=expected["repr"],
            cause="return leaves that are not tensors unchanged (the same objects)",
        )


def _describe_result(to_device, obj, *args, **kwargs) -> dict:
    return describe(to_device(obj, *args, **kwargs))


def _probe_to_device(to_device) -> dict:
    """Probe: move the sample batch to ``meta`` (twice), some bare leaves, and a batch with
    non_blocking=True under a recorder of tensor moves."""
    batch = _sample_batch()
    before = describe(batch)
    items_list = batch["items"]
    moved = [attempt(_describe_result, to_device, batch, d) for d in ("meta", torch.device("meta"))]
    after = describe(batch)
    leaves = []
    for leaf in (3, "text", None, 2.5):
        record = attempt(to_device, leaf, "meta")
        if record["ok"]:
            record["same"] = record["value"] is leaf
        leaves.append(record)
    with _ToRecorder() as rec:
        blocking = attempt(
            _describe_result,
            to_device,
            {"a": [torch.ones(2)], "b": (torch.zeros(1), Point(torch.ones(1), 0))},
            "meta",
            non_blocking=True,
        )
    return {
        "before": before,
        "moved": moved,
        "after": after,
        "same_list": batch["items"] is items_list,
        "leaves": leaves,
        "blocking": blocking,
        "moves": rec.moves,
    }


def check_to_device(to_device) -> None:
    """Check to_device on nested dicts, lists, tuples and namedtuples (moving to ``meta``).

    Moving to the ``meta`` device works on any machine, so whether every tensor was
    moved is visible on the CPU.

    Raises:
        CheckFailed: wrong container types, tensors not moved, leaves changed, input
            mutated, or ``non_blocking`` not passed on.
    """
    to_device = student(to_device, "to_device")
    seen = to_device.probe(_probe_to_device)
    for device, record in zip(("'meta'", "torch.device('meta')"), seen["moved"]):
        got = call_student(
            Recorded("to_device", [((), {})], [record]), name=f"to_device(batch, {device})"
        )
        _compare_structure(got, _moved(seen["before"], "meta"))
    require(
        seen["after"] == seen["before"] and seen["same_list"],
        "to_device must not change its input",
        yours="the input batch was modified in place",
        expected="the input left as it was, a new container returned",
        cause="build new lists/dicts instead of assigning into the input (obj[i] = ...)",
    )
    for leaf, record in zip((3, "text", None, 2.5), seen["leaves"]):
        got = call_student(
            Recorded("to_device", [((), {})], [record]), name="to_device(leaf, 'meta')"
        )
        require(
            record.get("same", False),
            "a leaf that is not a tensor must come back unchanged",
            yours=repr(got),
            expected=repr(leaf),
            cause="return non-tensor objects as they are",
        )
    call_student(
        Recorded("to_device", [((), {})], [seen["blocking"]]),
        name="to_device(batch, 'meta', non_blocking=True)",
    )
    moves = seen["moves"]
    require(
        len(moves) >= 3 and all(moves),
        "to_device(..., non_blocking=True) must pass non_blocking=True to every tensor move",
        yours=f"{sum(moves)} of {len(moves)} moves were non-blocking",
        expected="every move non-blocking",
        cause="forward the argument: tensor.to(device, non_blocking=non_blocking)",
    )
    passed(
        "to_device moves every tensor, keeps container types and leaves, and does not mutate its input"
    )


def _probe_to_device_cases(to_device, device: str) -> list:
    """Probe: the student's result for each hidden case, beside the case itself."""
    out = []
    for case in _hidden_cases():
        record = attempt(_describe_result, to_device, case, device)
        out.append({"case": describe(case), "record": record})
    return out


def check_to_device_hidden(to_device) -> None:
    """Compare to_device with the reference on more structures, on the default device."""
    to_device = student(to_device, "to_device")
    ref = reference(ASSIGNMENT).to_device
    device = "cuda:0" if torch.cuda.is_available() else "meta"
    seen = to_device.probe(_probe_to_device_cases, device)
    for case, item in zip(_hidden_cases(), seen):
        got = call_student(
            Recorded("to_device", [((), {})], [item["record"]]), name="to_device(case, ...)"
        )
        expected = describe(ref(case, device))
        _compare_structure(got, expected, path="case", ids=False)  # the reference's result
        _compare_structure(got, _moved(item["case"], device), path="case")  # leaves kept
    passed("to_device agrees with the reference on further structures")


def _probe_to_device_cuda(to_device) -> dict:
    """Probe: move a pinned batch to cuda:0 with non_blocking=True; describe and read it back."""
    batch = {
        "x": torch.randn(64, 64, generator=torch.Generator().manual_seed(1)).pin_memory(),
        "y": [Point(torch.arange(5).pin_memory(), "id")],
    }
    before = describe(batch)
    record = attempt(_describe_result, to_device, batch, "cuda:0", non_blocking=True)
    torch.cuda.synchronize()
    values = None
    if record["ok"]:
        got = to_device(batch, "cuda:0", non_blocking=True)
        torch.cuda.synchronize()
        with contextlib.suppress(Exception):
            values = got["x"].cpu()
    return {"before": before, "record": record, "x": values}


def check_to_device_cuda(to_device) -> None:
    """Check a real host-to-GPU move from pinned memory with non_blocking=True."""
    if not cuda_or_not_checked("to_device moving pinned tensors to a real GPU"):
        return
    to_device = student(to_device, "to_device")
    seen = to_device.probe(_probe_to_device_cuda)
    got = call_student(
        Recorded("to_device", [((), {})], [seen["record"]]),
        name="to_device(batch, 'cuda:0', non_blocking=True)",
    )
    _compare_structure(got, _moved(seen["before"], "cuda:0"))
    expected = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))
    require(
        isinstance(seen["x"], torch.Tensor) and torch.equal(seen["x"].cpu(), expected),
        "values changed on the way to the GPU",
        yours="different values",
        expected="the same values",
        cause="move with .to(device) only",
    )
    passed("to_device moves a pinned batch to the GPU without blocking")


# --------------------------------------------------------------------------- seed_everything
def _draw() -> tuple:
    return (random.random(), float(np.random.rand()), float(torch.rand(1)))


def _probe_seed_everything(seed_everything) -> dict:
    """Probe: seed, draw from each generator, seed again, draw, seed differently, draw; with
    cuDNN's flags set the wrong way first."""
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = False
    calls = []
    draws = []
    for seed in (1234, 1234, 4321):
        calls.append(attempt(seed_everything, seed))
        draws.append(_draw())
    return {
        "calls": calls,
        "draws": draws,
        "deterministic": torch.backends.cudnn.deterministic,
        "benchmark": torch.backends.cudnn.benchmark,
    }


def check_seed_everything(seed_everything) -> None:
    """Check that Python's random, NumPy and torch are seeded and cuDNN made deterministic.

    Raises:
        CheckFailed: a generator is not reseeded, the seed is ignored, or the cuDNN
            flags are not deterministic/no-benchmark.
    """
    seed_everything = student(seed_everything, "seed_everything")
    seen = seed_everything.probe(_probe_seed_everything)
    seeds = (1234, 1234, 4321)
    answers = Recorded("seed_everything", [((s,), {}) for s in seeds[:2]], seen["calls"][:2])
    result = call_student(answers, 1234)
    require(
        result is None,
        "seed_everything returns nothing",
        yours=result,
        expected=None,
        cause="it sets global state; no return value",
    )
    call_student(Recorded("seed_everything", [((4321,), {})], seen["calls"][2:]), 4321)
    first, second, other = seen["draws"]
    names = ("random.random()", "np.random.rand()", "torch.rand(1)")
    causes = (
        "call random.seed(seed)",
        "call np.random.seed(seed)",
        "call torch.manual_seed(seed) (it seeds every CUDA device too)",
    )
    for name, a, b, cause in zip(names, first, second, causes):
        require(
            a == b,
            f"{name} is not reproducible after seed_everything(1234)",
            yours=f"{a} then {b}",
            expected="the same number twice",
            cause=cause,
        )
    for name, a, b in zip(names, first, other):
        require(
            a != b,
            f"{name} gives the same number for seeds 1234 and 4321",
            yours=b,
            expected=f"something other than {a}",
            cause="seed with the `seed` argument, not a constant",
        )
    require(
        seen["deterministic"] is True,
        "torch.backends.cudnn.deterministic must be True",
        yours=seen["deterministic"],
        expected=True,
        cause="set torch.backends.cudnn.deterministic = True",
    )
    require(
        seen["benchmark"] is False,
        "torch.backends.cudnn.benchmark must be False",
        yours=seen["benchmark"],
        expected=False,
        cause="benchmark mode picks algorithms by timing, which varies run to run: set it to False",
    )
    passed("seed_everything makes random, NumPy and torch reproducible and cuDNN deterministic")


def _probe_seed_cuda(seed_everything) -> dict:
    """Probe: CUDA random numbers after seeding twice with 7."""
    first = attempt(seed_everything, 7)
    a = torch.rand(4, device="cuda").cpu()
    second = attempt(seed_everything, 7)
    b = torch.rand(4, device="cuda").cpu()
    return {"calls": [first, second], "a": a, "b": b}


def check_seed_everything_cuda(seed_everything) -> None:
    """Check that CUDA random numbers are reproducible after seeding."""
    if not cuda_or_not_checked("seeding the CUDA generators"):
        return
    seed_everything = student(seed_everything, "seed_everything")
    seen = seed_everything.probe(_probe_seed_cuda)
    call_student(Recorded("seed_everything", [((7,), {})], seen["calls"][:1]), 7)
    a, b = seen["a"], seen["b"]
    require(
        torch.equal(a, b),
        "torch.rand(device='cuda') is not reproducible",
        yours=f"{a.tolist()} then {b.tolist()}",
        expected="the same numbers twice",
        cause="torch.manual_seed(seed) seeds all devices; or call torch.cuda.manual_seed_all(seed)",
    )
    passed("seed_everything makes CUDA random numbers reproducible")


# --------------------------------------------------------------------------- visible_gpus
#: GPUs of the simulated machine the CPU checks play (current process and fresh children):
#: physical GPUs 0 and 2 are the slower kind, 1 and 3 the faster, so CUDA's default order
#: (FASTEST_FIRST: 1, 3, 0, 2) differs from PCI_BUS_ID order (0, 1, 2, 3). See
#: :mod:`grader.runtime.simulated_site.sitecustomize`.
SIMULATED_GPUS = 4
ORDERS = ("PCI_BUS_ID", "FASTEST_FIRST")


def _simulated_uuid(physical: int) -> str:
    from grader.runtime.simulated_site.sitecustomize import machine

    return str(machine(SIMULATED_GPUS)[physical].uuid)


def visible_calls(hidden: bool = False) -> list:
    """The calls the CPU check makes, as ``(args, kwargs)`` pairs. Each costs a fresh Python
    process that imports torch (about 2 s of CPU on a slow core), so each must reject answers
    the others let through:

    * ``("",)``: no GPU (an in-process ``os.environ`` change still sees all 4);
    * ``("2,0,-1,1",)`` with the default order, PCI_BUS_ID: physical 2 then 0 (ignoring
      ``device_order`` gives FASTEST_FIRST's 0 then 1; the list stops at ``-1``; indices, names
      or the UUIDs of this process are not what is asked);
    * ``("1,3", "FASTEST_FIRST")``: physical 3 then 2 (an answer that always passes
      PCI_BUS_ID gives 1 then 3);

    and, hidden, a list of UUID prefixes (physical 3 then 0, in either order) and a repeated
    index (no GPU at all).
    """
    if not hidden:
        return [(("",), {}), (("2,0,-1,1",), {}), (("1,3", "FASTEST_FIRST"), {})]
    prefixes = ",".join(f"GPU-{_simulated_uuid(k)[:8]}" for k in (3, 0))
    return [((prefixes, "FASTEST_FIRST"), {}), (("3,1,3", "PCI_BUS_ID"), {})]


def _call_order(args: tuple) -> str:
    return args[1] if len(args) > 1 else "PCI_BUS_ID"


def _expected_simulated(args: tuple, order: str | None = None) -> list:
    from grader.runtime.simulated_site.sitecustomize import visible_devices

    seen = visible_devices(args[0], SIMULATED_GPUS, order or _call_order(args))
    return [_simulated_uuid(k) for k in seen]


_SITE = Path(__file__).resolve().parent.parent / "runtime" / "simulated_site"
_WATCHED = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def _restore_environ(saved: dict) -> None:
    """Put back environment variables as ``saved`` holds them (``None``: unset)."""
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _probe_visible_gpus(visible_gpus, calls: list, simulate: bool) -> dict:
    """Probe: call the student's function for each call in a process whose CUDA is already
    initialised (a simulated 4-GPU machine on a CPU, whose fresh child processes see the same
    simulated machine; the real GPUs otherwise), with ``CUDA_DEVICE_ORDER`` unset so that a
    child that is not given it numbers GPUs fastest first. Records the UUIDs this process sees
    and whether the function changed this process's ``CUDA_VISIBLE_DEVICES`` or
    ``CUDA_DEVICE_ORDER``, and puts everything back."""
    from unittest import mock

    from grader.runtime.simulated_site.sitecustomize import (
        SIMULATED_GPUS_ENV,
        device_lookup,
        enumeration,
    )

    saved = {k: os.environ.get(k) for k in (*_WATCHED, "PYTHONPATH", SIMULATED_GPUS_ENV)}
    changed = []
    try:
        os.environ.pop("CUDA_DEVICE_ORDER", None)
        if simulate:
            path = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = str(_SITE) + (os.pathsep + path if path else "")
            os.environ[SIMULATED_GPUS_ENV] = str(SIMULATED_GPUS)
            props, name = device_lookup(enumeration(SIMULATED_GPUS, None), SIMULATED_GPUS)
            context = contextlib.ExitStack()
            context.enter_context(simulated_cuda(device_count=SIMULATED_GPUS, allow_real_gpu=True))
            context.enter_context(mock.patch.object(torch.cuda, "get_device_properties", props))
            context.enter_context(mock.patch.object(torch.cuda, "get_device_name", name))
        else:
            torch.cuda.init()
            context = contextlib.nullcontext()
        before = {k: os.environ.get(k) for k in _WATCHED}
        records = []
        with context:
            here = [
                str(torch.cuda.get_device_properties(i).uuid)
                for i in range(torch.cuda.device_count())
            ]
            for args, kwargs in calls:
                records.append(attempt(visible_gpus, *args, **kwargs))
                now = {k: os.environ.get(k) for k in _WATCHED}
                if now != before:
                    changed.append({k: v for k, v in now.items() if v != before[k]})
                    os.environ.update({k: v for k, v in before.items() if v is not None})
                    for k in [k for k, v in before.items() if v is None]:
                        os.environ.pop(k, None)
    finally:
        _restore_environ(saved)
    return {"records": records, "changed": changed, "here": here}


#: A ``sitecustomize`` that makes every ``import torch`` fail in the Python processes that run
#: with its folder first on ``PYTHONPATH``: the course's stand-in for a child whose torch is broken.
_BROKEN_TORCH_SITE = (
    "import sys\n"
    "sys.modules['torch'] = None  # the course's check: this child's `import torch` fails\n"
)


def _probe_visible_gpus_failing_child(visible_gpus) -> dict:
    """Probe: ``visible_gpus("0")`` when the child process fails (its ``import torch`` raises,
    through a ``sitecustomize`` first on the inherited ``PYTHONPATH``); the call's outcome, with
    ``PYTHONPATH`` and the watched variables put back."""
    import tempfile

    saved = {k: os.environ.get(k) for k in (*_WATCHED, "PYTHONPATH")}
    try:
        with tempfile.TemporaryDirectory(prefix="course-broken-torch-") as folder:
            (Path(folder) / "sitecustomize.py").write_text(_BROKEN_TORCH_SITE)
            path = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = folder + (os.pathsep + path if path else "")
            with contextlib.redirect_stdout(io.StringIO()):
                return attempt(visible_gpus, "0")
    finally:
        _restore_environ(saved)


def _check_visible_gpus_failing_child(visible_gpus) -> None:
    record = visible_gpus.probe(_probe_visible_gpus_failing_child)
    if record.get("ok"):
        yours = f"returned {record.get('value')!r}"
    else:
        types = record.get("error", {}).get("types", [])
        if "subprocess.CalledProcessError" in types:
            return
        yours = (
            f"raised {types[0].removeprefix('builtins.') if types else 'an exception'}: "
            + (str(record.get("error", {}).get("message", ""))[:200])
        )
    fail(
        "visible_gpus('0') when the child Python fails (here its `import torch` raises) must "
        "raise subprocess.CalledProcessError",
        yours=yours,
        expected="raises subprocess.CalledProcessError (the docstring's Raises)",
        cause="pass check=True to subprocess.run (or call check_returncode()): otherwise a "
        "failed child's empty output is read as if it were an answer",
    )


_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _bare(value):
    """A UUID without nvidia-smi's ``GPU-`` prefix (the check accepts both forms)."""
    return value[4:] if isinstance(value, str) and value.startswith("GPU-") else value


def _likely_cause(got, expected: list, other_order: list | None, here: list) -> str:
    if any(isinstance(v, int) and not isinstance(v, bool) for v in got):
        return (
            "these look like indices; return what identifies each GPU whatever the numbering: "
            "str(torch.cuda.get_device_properties(i).uuid) for each device the fresh process sees"
        )
    if any(isinstance(v, str) and not _UUID.fullmatch(v) for v in got):
        return (
            "not UUIDs: a name is not unique (a box often has several of the same GPU), and "
            "an index changes with the numbering; return each device's UUID, "
            "str(torch.cuda.get_device_properties(i).uuid)"
        )
    if got == here and expected != here:
        return (
            "these are the GPUs of this process. CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER are "
            "read once, at CUDA initialisation: changing os.environ in this process does nothing "
            "afterwards. Start a fresh Python process with a copy of this environment and both "
            "variables set (subprocess.run(..., env=dict(os.environ, CUDA_VISIBLE_DEVICES=..., "
            "CUDA_DEVICE_ORDER=...))) and ask it"
        )
    if other_order is not None and got == other_order:
        return (
            "numbered in the other order: pass CUDA_DEVICE_ORDER=device_order to the child too "
            "(without it CUDA numbers the GPUs fastest first, which need not be PCI bus order)"
        )
    return (
        "ask a fresh process what CUDA made of the value rather than reading it yourself: CUDA "
        "stops at the first invalid id (-1, an index past the last GPU), a repeated id hides "
        "every GPU, and entries may be UUIDs (GPU-...) or their prefixes"
    )


def _require_gpus(calls: list, expected: list, label: str, seen: dict, other: list) -> None:
    answers = Recorded("visible_gpus", calls, seen["records"])
    for (args, kwargs), want, other_order in zip(calls, expected, other):
        call = f"visible_gpus({', '.join(repr(a) for a in args)})"
        call += "" if len(args) > 1 else " (device_order defaults to 'PCI_BUS_ID')"
        got = call_student(answers, *args, **kwargs)
        require(
            isinstance(got, list) and all(isinstance(v, (str, int)) for v in got),
            f"{call} must return a list of str",
            yours=f"{got!r} ({type(got).__name__})",
            expected=want,
            cause="return a list with one UUID string per device the fresh process sees, "
            "e.g. parse its printed JSON with json.loads",
        )
        require(
            [_bare(v) for v in got] == want,
            f"{call} {label}",
            yours=got,
            expected=want,
            cause=_likely_cause([_bare(v) for v in got], want, other_order, seen["here"]),
        )
    require(
        not seen["changed"],
        "visible_gpus must not change this process's CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER",
        yours=seen["changed"][0] if seen["changed"] else None,
        expected="no change",
        cause="pass the values in the child's env=... instead of setting os.environ",
    )


def _in_other_order(calls: list, expected: list) -> list:
    """For each call, the expected list of the call with the same value in the other order,
    where the calls hold one (None otherwise): the hint for an answer that ignores the order."""
    table = {(args[0], _call_order(args)): want for (args, _), want in zip(calls, expected)}
    flip = {ORDERS[0]: ORDERS[1], ORDERS[1]: ORDERS[0]}
    return [table.get((args[0], flip[_call_order(args)])) for args, _ in calls]


def _reference_gpus(calls: list) -> list:
    ref = reference(ASSIGNMENT).visible_gpus
    return [ref(*args, **kwargs) for args, kwargs in calls]


#: The calls of the same check on a real GPU machine, compared with the reference: ``""`` and
#: ``"-1"`` expose no GPU (an answer that sets ``os.environ`` in this process still sees the GPUs
#: CUDA found at initialisation) and ``"0"`` exposes one, in each order (its UUID: not an index
#: or a name).
GPU_CALLS = [(("",), {}), (("-1",), {}), (("0",), {}), (("0", "FASTEST_FIRST"), {})]
#: Hidden: a repeated index (no GPU) and a list cut by an invalid id.
GPU_CALLS_HIDDEN = [(("0,0",), {}), (("0,-1,1", "FASTEST_FIRST"), {})]


def _check_visible_gpus(visible_gpus, hidden: bool) -> None:
    visible_gpus = student(visible_gpus, "visible_gpus")
    if torch.cuda.is_available():
        calls = GPU_CALLS_HIDDEN if hidden else GPU_CALLS
        expected = _reference_gpus(calls)
        other = _in_other_order(calls, expected)
        seen = visible_gpus.probe(_probe_visible_gpus, calls, False)
        label = "in a process whose CUDA is already initialised"
    else:
        calls = visible_calls(hidden)
        expected = [_expected_simulated(args) for args, _ in calls]
        other = [
            _expected_simulated(args, ORDERS[1 - ORDERS.index(_call_order(args))])
            for args, _ in calls
        ]
        seen = visible_gpus.probe(_probe_visible_gpus, calls, True)
        label = (
            f"in a process whose CUDA is initialised, on a (simulated) {SIMULATED_GPUS}-GPU "
            "machine with two kinds of GPU"
        )
    _require_gpus(calls, expected, label, seen, other)


def check_visible_gpus(visible_gpus) -> None:
    """Check visible_gpus in a process whose CUDA is initialised (on a CPU: a simulated
    4-GPU machine with two kinds of GPU, whose fresh processes see the same simulated GPUs).

    ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER`` are read once, when CUDA initialises, so
    only a fresh process sees new values.

    Raises:
        CheckFailed: a wrong list, or the current process's environment changed.
    """
    _check_visible_gpus(visible_gpus, hidden=False)
    _check_visible_gpus_failing_child(student(visible_gpus, "visible_gpus"))
    passed(
        "visible_gpus asks a fresh process, in the order asked, leaves this one alone and "
        "raises CalledProcessError when the child fails"
    )


def check_visible_gpus_hidden(visible_gpus) -> None:
    """Compare with the reference for more values: UUID entries and a repeated index (on a
    CPU: on the simulated machine)."""
    _check_visible_gpus(visible_gpus, hidden=True)
    passed("visible_gpus agrees with the reference")


def check_visible_gpus_cuda(visible_gpus) -> None:
    """On a real GPU, after CUDA is initialised, compare with fresh processes (the reference)
    for an empty value, ``-1``, every single GPU and all GPUs in both orders, and the last
    GPU named by its UUID."""
    if not cuda_or_not_checked("visible_gpus after CUDA is initialised on a real GPU"):
        return
    visible_gpus = student(visible_gpus, "visible_gpus")
    ref = reference(ASSIGNMENT).visible_gpus
    n = torch.cuda.device_count()
    every = ",".join(str(i) for i in range(n))
    values = [(v, o) for v in (*(str(i) for i in range(n)), every) for o in ORDERS]
    calls = [(("",), {}), (("-1",), {}), *(((v, o), {}) for v, o in dict.fromkeys(values))]
    last = ref(str(n - 1), "PCI_BUS_ID")
    if last:
        calls.append(((f"GPU-{last[0]}", "FASTEST_FIRST"), {}))
    expected = _reference_gpus(calls)
    seen = visible_gpus.probe(_probe_visible_gpus, calls, False)
    _require_gpus(
        calls,
        expected,
        "after CUDA is initialised on this GPU machine",
        seen,
        _in_other_order(calls, expected),
    )
    passed("visible_gpus is right on this GPU machine after CUDA initialisation")
