"""Checks for 01_devices: pick_device, to_device, seed_everything, visible_gpu_count.

Each ``check_*`` takes the student's object and raises :class:`~grader.common.CheckFailed`
with a teaching message when it misbehaves. ``check_*_cuda`` need a real GPU; the
others run on the CPU, using :func:`grader.simulate.simulated_cuda` to play a machine
with GPUs where the behaviour under test depends on having one.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from .common import (
    call_student,
    cuda_or_not_checked,
    expect_raises,
    passed,
    require,
)
from .course import reference
from .simulate import simulated_cuda

ASSIGNMENT = "01_devices"


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


def check_pick_device(pick_device) -> None:
    """Check pick_device on this machine, and without a GPU on simulated 1- and 2-GPU machines.

    Raises:
        CheckFailed: a returned value is not the expected ``torch.device``, or a device
            that does not exist is accepted.
    """
    _require_device(
        call_student(pick_device, "cpu"),
        torch.device("cpu"),
        "pick_device('cpu')",
        "return the preferred device when it exists",
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
        if not torch.backends.mps.is_available():
            _require_device(
                call_student(pick_device),
                torch.device("cpu"),
                "pick_device() without a GPU",
                "fall back to the CPU when neither CUDA nor MPS is available",
            )
        for count in (1, 2):
            with simulated_cuda(device_count=count):
                _check_pick_device_with_gpus(pick_device, count, "a (simulated) machine")
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


def _walk(obj, path="batch"):
    """Yield (path, leaf) for every leaf of a nested container."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, f"{path}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{path}[{i}]")
    else:
        yield path, obj


def _compare_structure(got, original, device: torch.device, path="batch") -> None:
    require(
        type(got) is type(original),
        f"{path} changed its container type",
        yours=type(got).__name__,
        expected=type(original).__name__,
        cause="rebuild each container with its own type; a namedtuple needs type(obj)(*fields), not tuple(...)"
        if isinstance(original, tuple) and hasattr(original, "_fields")
        else "rebuild each container with the same type as the input",
    )
    if isinstance(original, torch.Tensor):
        require(
            got.device.type == device.type,
            f"{path} is not on the target device",
            yours=str(got.device),
            expected=str(device),
            cause="call .to(device) on every tensor leaf",
        )
        require(
            got.shape == original.shape and got.dtype == original.dtype,
            f"{path} changed shape or dtype",
            yours=(tuple(got.shape), got.dtype),
            expected=(tuple(original.shape), original.dtype),
            cause="only move tensors; do not reshape or cast them",
        )
    elif isinstance(original, dict):
        require(
            list(got.keys()) == list(original.keys()),
            f"{path} has different keys",
            yours=list(got.keys()),
            expected=list(original.keys()),
            cause="keep every key, in order",
        )
        for k in original:
            _compare_structure(got[k], original[k], device, f"{path}[{k!r}]")
    elif isinstance(original, (list, tuple)):
        require(
            len(got) == len(original),
            f"{path} has a different length",
            yours=len(got),
            expected=len(original),
            cause="keep every element",
        )
        for i, (a, b) in enumerate(zip(got, original)):
            _compare_structure(a, b, device, f"{path}[{i}]")
    else:
        require(
            got is original,
            f"{path} (not a tensor) was changed",
            yours=got,
            expected=original,
            cause="return leaves that are not tensors unchanged",
        )


def check_to_device(to_device) -> None:
    """Check to_device on nested dicts, lists, tuples and namedtuples (moving to ``meta``).

    Moving to the ``meta`` device works on any machine, so whether every tensor was
    moved is visible on the CPU.

    Raises:
        CheckFailed: wrong container types, tensors not moved, leaves changed, input
            mutated, or ``non_blocking`` not passed on.
    """
    batch = _sample_batch()
    before = [
        (p, leaf.device if isinstance(leaf, torch.Tensor) else leaf) for p, leaf in _walk(batch)
    ]
    items_list = batch["items"]
    for device in ("meta", torch.device("meta")):
        moved = call_student(to_device, batch, device)
        _compare_structure(moved, _sample_batch(), torch.device("meta"))
    after = [
        (p, leaf.device if isinstance(leaf, torch.Tensor) else leaf) for p, leaf in _walk(batch)
    ]
    require(
        after == before and batch["items"] is items_list,
        "to_device must not change its input",
        yours="the input batch was modified in place",
        expected="the input left as it was, a new container returned",
        cause="build new lists/dicts instead of assigning into the input (obj[i] = ...)",
    )
    for leaf in (3, "text", None, 2.5):
        require(
            call_student(to_device, leaf, "meta") is leaf,
            "a leaf that is not a tensor must come back unchanged",
            yours=repr(call_student(to_device, leaf, "meta")),
            expected=repr(leaf),
            cause="return non-tensor objects as they are",
        )
    with _ToRecorder() as rec:
        call_student(
            to_device,
            {"a": [torch.ones(2)], "b": (torch.zeros(1), Point(torch.ones(1), 0))},
            "meta",
            non_blocking=True,
        )
    require(
        len(rec.moves) >= 3 and all(rec.moves),
        "to_device(..., non_blocking=True) must pass non_blocking=True to every tensor move",
        yours=f"{sum(rec.moves)} of {len(rec.moves)} moves were non-blocking",
        expected="every move non-blocking",
        cause="forward the argument: tensor.to(device, non_blocking=non_blocking)",
    )
    passed(
        "to_device moves every tensor, keeps container types and leaves, and does not mutate its input"
    )


def check_to_device_hidden(to_device) -> None:
    """Compare to_device with the reference on more structures, on the default device."""
    ref = reference(ASSIGNMENT).to_device
    device = torch.device("cuda:0") if torch.cuda.is_available() else torch.device("meta")
    cases = [
        [],
        (),
        {},
        torch.arange(3),
        [[torch.ones(1)], ((torch.zeros(2),),)],
        {"a": {"b": {"c": (1, torch.eye(2), Point("x", [torch.ones(1)]))}}},
        collections.OrderedDict(first=torch.ones(1), second=[2, "b"]),
    ]
    for case in cases:
        _compare_structure(
            call_student(to_device, case, device), ref(case, device), device, path="case"
        )
    passed("to_device agrees with the reference on further structures")


def check_to_device_cuda(to_device) -> None:
    """Check a real host-to-GPU move from pinned memory with non_blocking=True."""
    if not cuda_or_not_checked("to_device moving pinned tensors to a real GPU"):
        return
    batch = {
        "x": torch.randn(64, 64).pin_memory(),
        "y": [Point(torch.arange(5).pin_memory(), "id")],
    }
    snapshot = {"x": batch["x"].clone(), "y": [Point(batch["y"][0].x.clone(), "id")]}
    got = call_student(to_device, batch, "cuda:0", non_blocking=True)
    torch.cuda.synchronize()
    _compare_structure(got, snapshot, torch.device("cuda:0"))
    require(
        torch.equal(got["x"].cpu(), snapshot["x"]),
        "values changed on the way to the GPU",
        yours="different values",
        expected="the same values",
        cause="move with .to(device) only",
    )
    passed("to_device moves a pinned batch to the GPU without blocking")


# --------------------------------------------------------------------------- seed_everything
def _draw() -> tuple:
    return (random.random(), float(np.random.rand()), float(torch.rand(1)))


def check_seed_everything(seed_everything) -> None:
    """Check that Python's random, NumPy and torch are seeded and cuDNN made deterministic.

    Raises:
        CheckFailed: a generator is not reseeded, the seed is ignored, or the cuDNN
            flags are not deterministic/no-benchmark.
    """
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = False
    result = call_student(seed_everything, 1234)
    require(
        result is None,
        "seed_everything returns nothing",
        yours=result,
        expected=None,
        cause="it sets global state; no return value",
    )
    first = _draw()
    call_student(seed_everything, 1234)
    second = _draw()
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
    call_student(seed_everything, 4321)
    other = _draw()
    for name, a, b in zip(names, first, other):
        require(
            a != b,
            f"{name} gives the same number for seeds 1234 and 4321",
            yours=b,
            expected=f"something other than {a}",
            cause="seed with the `seed` argument, not a constant",
        )
    require(
        torch.backends.cudnn.deterministic is True,
        "torch.backends.cudnn.deterministic must be True",
        yours=torch.backends.cudnn.deterministic,
        expected=True,
        cause="set torch.backends.cudnn.deterministic = True",
    )
    require(
        torch.backends.cudnn.benchmark is False,
        "torch.backends.cudnn.benchmark must be False",
        yours=torch.backends.cudnn.benchmark,
        expected=False,
        cause="benchmark mode picks algorithms by timing, which varies run to run: set it to False",
    )
    passed("seed_everything makes random, NumPy and torch reproducible and cuDNN deterministic")


def check_seed_everything_cuda(seed_everything) -> None:
    """Check that CUDA random numbers are reproducible after seeding."""
    if not cuda_or_not_checked("seeding the CUDA generators"):
        return
    call_student(seed_everything, 7)
    a = torch.rand(4, device="cuda")
    call_student(seed_everything, 7)
    b = torch.rand(4, device="cuda")
    require(
        torch.equal(a, b),
        "torch.rand(device='cuda') is not reproducible",
        yours=f"{a.tolist()} then {b.tolist()}",
        expected="the same numbers twice",
        cause="torch.manual_seed(seed) seeds all devices; or call torch.cuda.manual_seed_all(seed)",
    )
    passed("seed_everything makes CUDA random numbers reproducible")


# --------------------------------------------------------------------------- visible_gpu_count
def check_visible_gpu_count(visible_gpu_count) -> None:
    """Check visible_gpu_count in a process whose CUDA is initialised (simulated with 4 GPUs on a CPU).

    ``CUDA_VISIBLE_DEVICES`` is read once, when CUDA initialises, so only a fresh
    process sees a new value. Here the current process plays a machine whose CUDA is
    initialised with 4 GPUs; a fresh process given ``""`` or ``"-1"`` sees 0 GPUs on
    any machine.

    Raises:
        CheckFailed: a wrong count, or the current process's environment changed.
    """
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    if torch.cuda.is_available():
        torch.cuda.init()  # a real initialised CUDA plays the part
        context = contextlib.nullcontext()
    else:
        context = simulated_cuda(device_count=4)
    with context:
        for value in ("", "-1"):
            got = call_student(visible_gpu_count, value)
            require(
                isinstance(got, int) and not isinstance(got, bool),
                f"visible_gpu_count({value!r}) must return an int",
                yours=f"{got!r} ({type(got).__name__})",
                expected="an int",
                cause="parse the child process's output with int(...)",
            )
            require(
                got == 0,
                f"visible_gpu_count({value!r}) in a process whose CUDA is already initialised",
                yours=got,
                expected=0,
                cause="CUDA_VISIBLE_DEVICES is read once, at CUDA initialisation: changing os.environ in this "
                "process does nothing afterwards. Run a fresh Python process with the variable set "
                "(subprocess.run with env=...) and count there.",
            )
    require(
        os.environ.get("CUDA_VISIBLE_DEVICES") == saved,
        "visible_gpu_count must not change this process's CUDA_VISIBLE_DEVICES",
        yours=os.environ.get("CUDA_VISIBLE_DEVICES"),
        expected=saved,
        cause="pass the value in the child's env=... instead of setting os.environ",
    )
    passed("visible_gpu_count asks a fresh process and leaves this one's environment alone")


def check_visible_gpu_count_hidden(visible_gpu_count) -> None:
    """Compare with the reference for a value naming GPU 0 on this machine."""
    got = call_student(visible_gpu_count, "0")
    if "CUDA_VISIBLE_DEVICES" not in os.environ and torch.cuda.device_count() == 0:
        expected = 0  # no GPU is visible even unrestricted, so a restricted child sees none
    else:
        expected = reference(ASSIGNMENT).visible_gpu_count("0")
    require(
        got == expected,
        "visible_gpu_count('0') on this machine",
        yours=got,
        expected=expected,
        cause="count the GPUs a fresh process sees: torch.cuda.device_count() in the child",
    )
    passed("visible_gpu_count agrees with the reference")


def check_visible_gpu_count_cuda(visible_gpu_count) -> None:
    """On a real GPU, after CUDA is initialised here, compare with a fresh process."""
    if not cuda_or_not_checked("visible_gpu_count after CUDA is initialised on a real GPU"):
        return
    torch.cuda.init()
    ref = reference(ASSIGNMENT).visible_gpu_count
    n = torch.cuda.device_count()
    for value in ("", ",".join(str(i) for i in range(n))):
        got, expected = call_student(visible_gpu_count, value), ref(value)
        require(
            got == expected,
            f"visible_gpu_count({value!r}) after CUDA is initialised",
            yours=got,
            expected=expected,
            cause="run a fresh process with the variable set; this process's CUDA is already initialised",
        )
    passed("visible_gpu_count is right on this GPU machine after CUDA initialisation")
