"""Stand-ins that let CUDA behaviour be checked on a machine without a GPU.

Two tools, both used by checks and by the notebooks' demos, and both labelled as
simulations wherever a student sees them:

* :func:`simulated_cuda` patches ``torch.cuda`` (and ``torch.accelerator``) so the
  current process looks like a machine with ``device_count`` GPUs whose work queue is
  asynchronous: :meth:`SimulatedCuda.launch` enqueues a "kernel" of a given duration
  and returns at once, as a real launch does; ``torch.cuda.synchronize()``,
  ``Event.synchronize()`` and ``Event.elapsed_time()`` wait for and measure that
  queue. A timer that forgets to synchronize measures ~0 ms here, exactly the bug it
  has on a real GPU. No tensor is ever placed on the simulated device.
* :class:`SyncRecorder` is a :class:`torch.overrides.TorchFunctionMode` that records
  every tensor call which, on a GPU, makes the host wait for the device (``.item()``,
  ``.tolist()``, ``.cpu()``, ``bool(t)``, printing a tensor, boolean-mask indexing,
  ...). On the CPU nothing waits, but the calls are the same, so a loop that would
  synchronize on a GPU is caught here too.
"""

from __future__ import annotations

import contextlib
import time
import types
from collections.abc import Iterator
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode


class SimulatedCuda:
    """A fake asynchronous CUDA device: one in-order stream and its clock.

    Time is real (``time.perf_counter``): a launched kernel of ``ms`` milliseconds
    finishes ``ms`` after the previous one does, or after now if the queue is idle.

    Args:
        device_count: How many GPUs ``torch.cuda.device_count()`` reports.
        name: What ``torch.cuda.get_device_name()`` reports.
    """

    def __init__(self, device_count: int = 1, name: str = "Simulated GPU (course stand-in)"):
        if device_count < 0:
            raise ValueError(f"device_count must be >= 0, got {device_count}")
        self.device_count = device_count
        self.name = name
        self.busy_until = time.perf_counter()
        self.launches = 0
        self.synchronizations = 0

    def launch(self, ms: float) -> None:
        """Enqueue a kernel that runs for ``ms`` milliseconds; return immediately."""
        if ms < 0:
            raise ValueError(f"kernel duration must be >= 0 ms, got {ms}")
        self.busy_until = max(time.perf_counter(), self.busy_until) + ms / 1000.0
        self.launches += 1

    def pending_ms(self) -> float:
        """Milliseconds of queued work not finished yet."""
        return max(0.0, (self.busy_until - time.perf_counter()) * 1000.0)

    def synchronize(self, *_args, **_kwargs) -> None:
        """Block until every launched kernel has finished (``torch.cuda.synchronize``)."""
        self.synchronizations += 1
        _sleep_until(self.busy_until)

    def completion_time(self) -> float:
        """The ``perf_counter`` time at which work queued so far completes."""
        return max(time.perf_counter(), self.busy_until)

    # --- stand-ins for torch.cuda / torch.accelerator functions -------------------
    def _check_index(self, device=None) -> int:
        index = (
            0 if device is None else (device.index if isinstance(device, torch.device) else device)
        )
        if isinstance(index, str):
            index = torch.device(index).index or 0
        if index is None:
            index = 0
        if not 0 <= int(index) < self.device_count:
            raise AssertionError(
                f"Invalid device id {index}: the simulated machine has {self.device_count} GPU(s)"
            )
        return int(index)

    def get_device_name(self, device=None) -> str:
        self._check_index(device)
        return self.name

    def get_device_properties(self, device=None):
        self._check_index(device)
        return types.SimpleNamespace(
            name=self.name, total_memory=80 * 2**30, major=9, minor=0, multi_processor_count=132
        )


class _SimEvent:
    """Stand-in for ``torch.cuda.Event`` on a :class:`SimulatedCuda`."""

    sim: SimulatedCuda  # set on the subclass made per simulation

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ):
        self.enable_timing = enable_timing
        self.time: float | None = None

    def record(self, stream=None) -> None:
        self.time = self.sim.completion_time()

    def query(self) -> bool:
        return self.time is not None and time.perf_counter() >= self.time

    def synchronize(self) -> None:
        if self.time is None:
            raise RuntimeError("Event.synchronize() on an event that was never recorded")
        self.sim.synchronizations += 1
        _sleep_until(self.time)

    def wait(self, stream=None) -> None:
        """Make a stream wait for this event; the simulation has one in-order stream."""

    def elapsed_time(self, end: _SimEvent) -> float:
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Events were not created with enable_timing=True")
        if self.time is None or end.time is None:
            raise RuntimeError("Both events must be recorded before elapsed_time()")
        if not end.query():
            raise RuntimeError(
                "elapsed_time() on an event that has not completed: call end.synchronize() "
                "or torch.cuda.synchronize() first (a real GPU raises here too)"
            )
        return (end.time - self.time) * 1000.0


class _SimStream:
    def __init__(self, sim: SimulatedCuda):
        self.sim = sim

    def synchronize(self) -> None:
        self.sim.synchronize()

    def wait_stream(self, other) -> None:
        """One in-order stream: nothing to wait for."""

    def wait_event(self, event) -> None:
        """One in-order stream: nothing to wait for."""

    def record_event(self, event=None):
        event = event or torch.cuda.Event()
        event.record(self)
        return event


def _sleep_until(deadline: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


@contextlib.contextmanager
def simulated_cuda(
    device_count: int = 1, name: str = "Simulated GPU (course stand-in)"
) -> Iterator[SimulatedCuda]:
    """Make this process look like a machine with ``device_count`` asynchronous GPUs.

    Inside the ``with`` block ``torch.cuda.is_available()`` is True (when
    ``device_count > 0``), ``device_count()`` is ``device_count``, and
    ``synchronize``, ``Event``, ``current_stream``, ``get_device_name`` and
    ``get_device_properties`` act on the simulated queue; ``torch.accelerator``'s
    matching functions agree. Tensors cannot be placed on the simulated device.

    Args:
        device_count: Number of simulated GPUs (0 simulates a machine without one).
        name: Device name reported.

    Yields:
        The :class:`SimulatedCuda`, whose :meth:`~SimulatedCuda.launch` enqueues work.

    Raises:
        RuntimeError: when a real CUDA device is present (the simulation would hide it).
    """
    if torch.cuda.is_available():
        raise RuntimeError(
            "simulated_cuda() is for machines without a GPU; use the real device here"
        )
    sim = SimulatedCuda(device_count, name)
    event_cls = type("Event", (_SimEvent,), {"sim": sim})
    stream = _SimStream(sim)
    available = device_count > 0
    patches = [
        mock.patch.object(torch.cuda, "is_available", lambda: available),
        mock.patch.object(torch.cuda, "device_count", lambda: device_count),
        mock.patch.object(torch.cuda, "synchronize", sim.synchronize),
        mock.patch.object(torch.cuda, "Event", event_cls),
        mock.patch.object(torch.cuda, "current_stream", lambda device=None: stream),
        mock.patch.object(torch.cuda, "default_stream", lambda device=None: stream),
        mock.patch.object(torch.cuda, "current_device", lambda: 0),
        mock.patch.object(torch.cuda, "get_device_name", sim.get_device_name),
        mock.patch.object(torch.cuda, "get_device_properties", sim.get_device_properties),
        mock.patch.object(torch.cuda, "is_initialized", lambda: True),
    ]
    accel = getattr(torch, "accelerator", None)
    if accel is not None:
        for attr, value in {
            "is_available": lambda: available,
            "device_count": lambda: device_count,
            "synchronize": sim.synchronize,
            "current_accelerator": lambda check_available=False: (
                torch.device("cuda") if available else None
            ),
        }.items():
            if hasattr(accel, attr):
                patches.append(mock.patch.object(accel, attr, value))
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        yield sim


#: Tensor calls that make the host wait for the device when the tensor lives on a GPU.
SYNCHRONIZING_CALLS = {
    "item": ".item()",
    "tolist": ".tolist()",
    "numpy": ".numpy()",
    "cpu": ".cpu()",
    "__bool__": "bool(tensor) / if tensor: (a data-dependent branch)",
    "__float__": "float(tensor)",
    "__int__": "int(tensor)",
    "__index__": "using a tensor as an index or range bound",
    "__repr__": "printing or repr() of a tensor",
    "__format__": "formatting a tensor in an f-string",
    "nonzero": "torch.nonzero (output size depends on the data)",
    "unique": "torch.unique (output size depends on the data)",
    "masked_select": "torch.masked_select (output size depends on the data)",
}


class SyncRecorder(TorchFunctionMode):
    """Record the tensor calls that would synchronize the host with a GPU.

    Use as a context manager; afterwards :attr:`calls` lists the descriptions of the
    synchronizing calls made inside, in order (see :data:`SYNCHRONIZING_CALLS`), and
    boolean-mask indexing (``x[x > 0]``) is recorded as well.
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in SYNCHRONIZING_CALLS:
            self.calls.append(SYNCHRONIZING_CALLS[name])
        elif name == "__getitem__" and len(args) > 1 and _has_bool_tensor(args[1]):
            self.calls.append("boolean-mask indexing x[mask] (output size depends on the data)")
        return func(*args, **kwargs)

    def summary(self) -> str:
        """The recorded calls with counts, e.g. ``".item() x4, float(tensor) x1"``."""
        counts: dict[str, int] = {}
        for call in self.calls:
            counts[call] = counts.get(call, 0) + 1
        return ", ".join(f"{call} x{n}" for call, n in counts.items())


def _has_bool_tensor(index) -> bool:
    if isinstance(index, torch.Tensor):
        return index.dtype == torch.bool
    if isinstance(index, tuple):
        return any(_has_bool_tensor(i) for i in index)
    return False
