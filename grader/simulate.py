"""Stand-ins that let CUDA behaviour be checked on a machine without a GPU.

Two tools, both used by checks and by the notebooks' demos, and both labelled as
simulations wherever a student sees them:

* :func:`simulated_cuda` patches ``torch.cuda`` (and ``torch.accelerator``) so the
  current process looks like a machine with ``device_count`` GPUs whose work is
  asynchronous. :meth:`SimulatedCuda.launch` enqueues a "kernel" of a given duration on
  the current stream and returns at once, as a real launch does. Streams
  (``torch.cuda.Stream``, ``torch.cuda.stream(s)``, ``wait_stream``, events) behave as in
  CUDA: work on one stream runs in order, work on different streams runs concurrently,
  and ``wait_stream``/``wait_event`` order them. Time is real (``time.perf_counter``), so
  a timer that forgets to synchronize measures ~0 ms here, exactly the bug it has on a
  real GPU, and overlap shows as a shorter wall-clock time.

  With ``transfers=True`` it also plays host-to-device copies: ``tensor.pin_memory()``,
  ``tensor.to("cuda", non_blocking=...)`` and ``.cuda()`` return CPU tensors that the
  simulation tracks as device tensors, with the CUDA rules for overlap (CUDA C++
  Programming Guide, "Asynchronous Concurrent Execution"): a copy overlaps kernels only
  when its source is pinned and the copy is non-blocking; it then runs on the current
  stream and on the single host-to-device copy engine. Any other copy makes the host wait
  for the device and blocks it for the transfer. :meth:`SimulatedCuda.launch` with
  ``reads=`` reports a kernel that reads a tensor before its copy has landed. A 2-D matmul
  of device tensors becomes a kernel whose duration follows a simple Tensor Core model
  (:data:`SIM_MATMUL_TFLOPS`); its result has the right shape but no computed values.
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
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode

#: Simulated host-to-device bandwidth from pinned memory, GB/s (10^9 bytes/s). The
#: simulation's copies are slow on purpose, so overlap is visible in milliseconds.
SIM_H2D_GBPS = 0.25


#: Simulated matmul throughput, TFLOP/s, when every dimension is a multiple of the dtype's
#: Tensor Core granule (8 for fp16/bf16, 4 for TF32); misaligned shapes run at
#: ``SIM_MISALIGNED_FRACTION`` of it. Illustrative values of the right shape, not a GPU's
#: measurements (those are in images/recorded_figures.json when recorded).
SIM_MATMUL_TFLOPS = {
    torch.float16: 400.0,
    torch.bfloat16: 400.0,
    "tf32": 200.0,
    torch.float32: 50.0,
}
SIM_MISALIGNED_FRACTION = 0.5


@dataclass
class KernelRecord:
    """One simulated kernel or copy, for timelines: which stream, when, what."""

    stream: int
    label: str
    start: float  # perf_counter seconds
    end: float


@dataclass
class DeviceTensorInfo:
    """What the simulation knows about a tensor "on the device"."""

    stream: int
    ready_at: float  # perf_counter seconds when its copy (or producing kernel) completes
    pinned_source: bool
    non_blocking: bool
    seq: int  # order of the copy among all simulated transfers


class _IdentityMap:
    """A weak map keyed by object identity (tensors compare elementwise, so a WeakSet or
    WeakKeyDictionary cannot hold them)."""

    def __init__(self):
        self._items: dict[int, tuple[weakref.ref, object]] = {}

    def __setitem__(self, obj, value) -> None:
        key = id(obj)
        self._items[key] = (
            weakref.ref(obj, lambda _ref, key=key: self._items.pop(key, None)),
            value,
        )

    def get(self, obj, default=None):
        item = self._items.get(id(obj))
        return item[1] if item is not None and item[0]() is obj else default

    def __contains__(self, obj) -> bool:
        item = self._items.get(id(obj))
        return item is not None and item[0]() is obj

    def add(self, obj) -> None:
        self[obj] = True


class RaceError(RuntimeError):
    """A simulated kernel read a tensor before the work producing it had finished."""


class SimulatedCuda:
    """A fake asynchronous CUDA device with streams, a copy engine, an allocator and a clock.

    Args:
        device_count: How many GPUs ``torch.cuda.device_count()`` reports.
        name: What ``torch.cuda.get_device_name()`` reports.
        h2d_gbps: Host-to-device bandwidth from pinned memory, GB/s.
        pageable_gbps: Bandwidth of copies from pageable memory (default: ``h2d_gbps``).
        pin_gbps: Rate at which ``pin_memory()`` copies into page-locked memory, GB/s
            (default: free).
        virtual_time: Run on a virtual clock: waiting advances the clock instead of
            sleeping, and ``time.perf_counter``/``monotonic``/``time`` read it (each read
            advances it by 1 nanosecond, so no interval is ever zero). Results are then
            exact and instant; host computation takes no time.
    """

    def __init__(
        self,
        device_count: int = 1,
        name: str = "Simulated GPU (course stand-in)",
        *,
        h2d_gbps: float = SIM_H2D_GBPS,
        pageable_gbps: float | None = None,
        pin_gbps: float | None = None,
        virtual_time: bool = False,
    ):
        if device_count < 0:
            raise ValueError(f"device_count must be >= 0, got {device_count}")
        self.device_count = device_count
        self.name = name
        self.h2d_gbps = h2d_gbps
        self.pageable_gbps = pageable_gbps or h2d_gbps
        self.pin_gbps = pin_gbps
        self.virtual_time = virtual_time
        self._vclock = 1000.0
        self.streams: list[_SimStream] = []
        self.default = _SimStream(self)
        self.current = self.default
        self.copy_engine_free = self.now()
        self.kernels: list[KernelRecord] = []
        self.launches = 0
        self.synchronizations = 0
        self.transfers = 0
        self.races: list[str] = []
        self.pinned = _IdentityMap()
        self.on_device = _IdentityMap()
        self.t0 = self.now()
        # caching allocator: bytes in use, peak, reserved from the "driver", cached (free) part
        self.allocated = self.peak = self.reserved = self.peak_reserved = self.cached = 0
        self._blocks: dict[int, int] = {}
        self._next_block = 1

    # --- clock ----------------------------------------------------------------------
    def now(self) -> float:
        """The simulation's clock in seconds (real ``perf_counter``, or the virtual clock)."""
        return self._vclock if self.virtual_time else time.perf_counter()

    def sleep_until(self, deadline: float) -> None:
        """Block the host until ``deadline`` (on the virtual clock: jump to it)."""
        if self.virtual_time:
            self._vclock = max(self._vclock, deadline)
        else:
            _sleep_until(deadline)

    def _host_clock_read(self) -> float:
        self._vclock += 1e-9  # host code takes (almost) no virtual time, but never none
        return self._vclock

    # --- caching allocator ---------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        """Allocate ``nbytes`` on the simulated device; return a block handle.

        Sizes are rounded up to 512 bytes and memory is reserved from the "driver" in
        2 MiB segments that stay reserved when freed, as PyTorch's caching allocator does
        (pytorch.org/docs/stable/notes/cuda.html#memory-management).
        """
        size = max(512, -(-int(nbytes) // 512) * 512)
        if size > self.cached:
            grow = -(-(size - self.cached) // (2 * 2**20)) * (2 * 2**20)
            self.reserved += grow
            self.cached += grow
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.cached -= size
        self.allocated += size
        self.peak = max(self.peak, self.allocated)
        handle, self._next_block = self._next_block, self._next_block + 1
        self._blocks[handle] = size
        return handle

    def free(self, handle: int) -> None:
        """Free a block; its memory stays reserved (cached) until ``empty_cache``."""
        size = self._blocks.pop(handle)
        self.allocated -= size
        self.cached += size

    def empty_cache(self) -> None:
        """Return cached blocks to the "driver" (``torch.cuda.empty_cache``)."""
        self.reserved -= self.cached
        self.cached = 0

    def reset_peak(self, device=None) -> None:
        """``torch.cuda.reset_peak_memory_stats``: the peaks restart from the current values."""
        self.peak = self.allocated
        self.peak_reserved = self.reserved

    def memory_stats(self, device=None) -> dict:
        """The subset of ``torch.cuda.memory_stats`` keys the course uses."""
        return {
            "allocated_bytes.all.current": self.allocated,
            "allocated_bytes.all.peak": self.peak,
            "reserved_bytes.all.current": self.reserved,
            "reserved_bytes.all.peak": self.peak_reserved,
        }

    # --- work -----------------------------------------------------------------------
    def launch(
        self, ms: float, *, reads: Iterable[torch.Tensor] = (), label: str = "kernel", stream=None
    ) -> float:
        """Enqueue a kernel of ``ms`` milliseconds on a stream (default: the current one).

        Args:
            ms: Duration in milliseconds.
            reads: Device tensors the kernel reads; reading one before its producer
                finished is recorded in :attr:`races` (and raises :class:`RaceError`).
            label: Name shown on timelines.
            stream: A simulated stream; the current stream when None.

        Returns:
            The ``perf_counter`` time at which the kernel will finish.

        Raises:
            ValueError: negative duration.
            RaceError: the kernel reads a tensor that is not ready when it starts.
        """
        if ms < 0:
            raise ValueError(f"kernel duration must be >= 0 ms, got {ms}")
        stream = stream or self.current
        start = max(self.now(), stream.busy_until)
        for tensor in reads:
            info = self.on_device.get(tensor)
            if info is not None and info.ready_at > start + 1e-6:
                message = (
                    f"{label} on stream {stream.id} started {1000 * (info.ready_at - start):.1f} ms before "
                    f"the copy of a tensor it reads (issued on stream {info.stream}) had finished"
                )
                self.races.append(message)
                raise RaceError(message)
        end = start + ms / 1000.0
        stream.busy_until = end
        self.kernels.append(KernelRecord(stream.id, label, start, end))
        self.launches += 1
        return end

    def produce(self, tensor: torch.Tensor, ready_at: float | None = None) -> torch.Tensor:
        """Mark ``tensor`` as a device tensor written by the work queued so far on the current stream."""
        ready = self.current.busy_until if ready_at is None else ready_at
        self.on_device[tensor] = DeviceTensorInfo(
            self.current.id, ready, False, True, self.transfers
        )
        return tensor

    def copy_to_device(
        self, src: torch.Tensor, non_blocking: bool, dst: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Play ``src.to("cuda", non_blocking=...)`` (or ``dst.copy_(src)``); return the
        tracked device tensor (a CPU tensor object the simulation tracks)."""
        nbytes = src.numel() * src.element_size()
        pinned = src in self.pinned
        gbps = self.h2d_gbps if pinned else self.pageable_gbps
        ms = nbytes / (gbps * 1e9) * 1000.0
        if dst is None:
            out = src.detach().view_as(
                src
            )  # a new tensor object, no host copy: keeps timing honest
        else:
            with torch.no_grad():
                dst.copy_(src)
            out = dst
        self.transfers += 1
        if pinned and non_blocking:
            start = max(self.now(), self.current.busy_until, self.copy_engine_free)
            end = start + ms / 1000.0
            self.current.busy_until = end
            self.copy_engine_free = end
        else:
            # Pageable or blocking: the host waits for the device to be idle, then for the copy.
            start = max([self.now(), self.copy_engine_free] + [s.busy_until for s in self.streams])
            end = start + ms / 1000.0
            for stream in self.streams:
                stream.busy_until = max(stream.busy_until, end)
            self.copy_engine_free = end
            self.sleep_until(end)
        label = "H2D copy" + ("" if pinned else " (pageable)")
        self.kernels.append(KernelRecord(self.current.id, label, start, end))
        self.on_device[out] = DeviceTensorInfo(
            self.current.id, end, pinned, non_blocking, self.transfers
        )
        return out

    def matmul_tflops(self, dtype: torch.dtype, *dims: int) -> float:
        """The simulated throughput of a matmul of this dtype and these dimensions."""
        if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
            peak, granule = SIM_MATMUL_TFLOPS["tf32"], 4
        elif dtype in (torch.float16, torch.bfloat16):
            peak, granule = SIM_MATMUL_TFLOPS[dtype], 8
        else:
            return SIM_MATMUL_TFLOPS[torch.float32]
        aligned = all(d % granule == 0 for d in dims)
        return peak if aligned else peak * SIM_MISALIGNED_FRACTION

    def matmul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Play ``a @ b`` for 2-D device tensors: a kernel of 2*m*k*n flops; the result's
        values are not computed (only its shape and dtype are real)."""
        (m, k), (k2, n) = a.shape, b.shape
        if k != k2:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({m}x{k} and {k2}x{n})")
        ms = 2.0 * m * k * n / (self.matmul_tflops(a.dtype, m, k, n) * 1e12) * 1000.0
        end = self.launch(ms, reads=(a, b), label="matmul")
        out = torch.empty(m, n, dtype=a.dtype)
        self.on_device[out] = DeviceTensorInfo(self.current.id, end, False, True, self.transfers)
        return out

    def pin(self, src: torch.Tensor) -> torch.Tensor:
        """Play ``src.pin_memory()``: a tracked alias, costing host time at ``pin_gbps``."""
        if src in self.pinned:
            return src
        if self.pin_gbps:
            nbytes = src.numel() * src.element_size()
            self.sleep_until(self.now() + nbytes / (self.pin_gbps * 1e9))
        out = src.detach().view_as(src)
        self.pinned.add(out)
        return out

    def device_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Register a freshly made tensor as living on the simulated device (ready now)."""
        self.on_device[tensor] = DeviceTensorInfo(
            self.current.id, self.now(), False, True, self.transfers
        )
        return tensor

    def synchronize(self, *_args, **_kwargs) -> None:
        """Block until every stream is idle (``torch.cuda.synchronize``)."""
        self.synchronizations += 1
        self.sleep_until(self.completion_time())

    def completion_time(self) -> float:
        """The ``perf_counter`` time at which all work queued so far completes."""
        return max([self.now(), self.copy_engine_free] + [s.busy_until for s in self.streams])

    def timeline(self) -> list[KernelRecord]:
        """Kernels and copies so far, times relative to the simulation's start (seconds)."""
        return [
            KernelRecord(k.stream, k.label, k.start - self.t0, k.end - self.t0)
            for k in self.kernels
        ]

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

    @contextlib.contextmanager
    def use_stream(self, stream):
        """Stand-in for ``torch.cuda.stream(s)``: make ``s`` current inside the block."""
        previous = self.current
        self.current = stream if stream is not None else previous
        try:
            yield stream
        finally:
            self.current = previous


class _SimStream:
    """Stand-in for ``torch.cuda.Stream``: an in-order queue with its own clock."""

    def __init__(self, sim: SimulatedCuda, device=None, priority: int = 0):
        self.sim = sim
        self.id = len(sim.streams)
        self.busy_until = sim.now()
        sim.streams.append(self)

    def synchronize(self) -> None:
        self.sim.synchronizations += 1
        self.sim.sleep_until(self.busy_until)

    def query(self) -> bool:
        return self.sim.now() >= self.busy_until

    def wait_stream(self, other: _SimStream) -> None:
        """Later work on this stream starts after everything queued on ``other`` so far."""
        self.busy_until = max(self.busy_until, other.busy_until)

    def wait_event(self, event) -> None:
        if event.time is not None:
            self.busy_until = max(self.busy_until, event.time)

    def record_event(self, event=None):
        event = event or torch.cuda.Event()
        event.record(self)
        return event

    def __enter__(self):
        self._ctx = self.sim.use_stream(self)
        return self._ctx.__enter__()

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)

    def __repr__(self) -> str:
        return f"<simulated stream {self.id}>"


class _SimEvent:
    """Stand-in for ``torch.cuda.Event`` on a :class:`SimulatedCuda`."""

    sim: SimulatedCuda  # set on the subclass made per simulation

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ):
        self.enable_timing = enable_timing
        self.time: float | None = None

    def record(self, stream=None) -> None:
        stream = stream or self.sim.current
        self.time = max(self.sim.now(), stream.busy_until)

    def query(self) -> bool:
        return self.time is not None and self.sim.now() >= self.time

    def synchronize(self) -> None:
        if self.time is None:
            raise RuntimeError("Event.synchronize() on an event that was never recorded")
        self.sim.synchronizations += 1
        self.sim.sleep_until(self.time)

    def wait(self, stream=None) -> None:
        """Make a stream (default: the current one) wait for this event."""
        (stream or self.sim.current).wait_event(self)

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


class _TransferMode(TorchFunctionMode):
    """Plays pinning and host-to-device copies on the simulated device."""

    def __init__(self, sim: SimulatedCuda):
        super().__init__()
        self.sim = sim

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "pin_memory":
            return self.sim.pin(args[0])
        if (
            name == "copy_"
            and len(args) > 1
            and args[0] in self.sim.on_device
            and args[1] not in self.sim.on_device
        ):
            non_blocking = kwargs.get("non_blocking", False) is True or (
                len(args) > 2 and args[2] is True
            )
            return self.sim.copy_to_device(args[1], non_blocking, dst=args[0])
        if (
            name in ("matmul", "mm", "__matmul__")
            and len(args) == 2
            and all(
                isinstance(a, torch.Tensor) and a in self.sim.on_device and a.dim() == 2
                for a in args
            )
        ):
            return self.sim.matmul(*args)
        if name in _FACTORIES and _device_is_cuda(kwargs.get("device")):
            kwargs = dict(kwargs, device="cpu")
            return self.sim.device_tensor(func(*args, **kwargs))
        if name == "is_pinned":
            return args[0] in self.sim.pinned
        if (
            name in ("to", "cuda")
            and isinstance(args[0], torch.Tensor)
            and _targets_cuda(name, args, kwargs)
        ):
            non_blocking = kwargs.get("non_blocking", False) is True or any(
                a is True for a in args[1:]
            )
            src = args[0]
            if src in self.sim.on_device:
                return src
            return self.sim.copy_to_device(src, non_blocking)
        return func(*args, **kwargs)


#: Tensor factories that, with ``device="cuda"``, make a tensor on the simulated device.
_FACTORIES = {
    "empty",
    "zeros",
    "ones",
    "full",
    "randn",
    "rand",
    "arange",
    "empty_like",
    "zeros_like",
    "ones_like",
}


def _device_is_cuda(target) -> bool:
    if isinstance(target, str):
        return target.startswith("cuda")
    if isinstance(target, torch.device):
        return target.type == "cuda"
    return False


def _targets_cuda(name: str, args, kwargs) -> bool:
    if name == "cuda":
        return True
    return _device_is_cuda(kwargs.get("device", args[1] if len(args) > 1 else None))


def _sleep_until(deadline: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


@contextlib.contextmanager
def simulated_cuda(
    device_count: int = 1,
    name: str = "Simulated GPU (course stand-in)",
    *,
    transfers: bool = False,
    allow_real_gpu: bool = False,
    **device_options,
) -> Iterator[SimulatedCuda]:
    """Make this process look like a machine with ``device_count`` asynchronous GPUs.

    Inside the ``with`` block ``torch.cuda.is_available()`` is True (when
    ``device_count > 0``), ``device_count()`` is ``device_count``, and
    ``synchronize``, ``Event``, ``Stream``, ``stream``, ``current_stream``,
    ``default_stream``, ``get_device_name`` and ``get_device_properties`` act on the
    simulated device; ``torch.accelerator``'s matching functions agree.

    Args:
        device_count: Number of simulated GPUs (0 simulates a machine without one).
        name: Device name reported.
        transfers: Also play tensors on the simulated device (see the module docstring):
            ``pin_memory``, copies to ``"cuda"``, ``dst.copy_(src)``, factories such as
            ``torch.empty(..., device="cuda")`` and 2-D matmuls of device tensors. Without
            it tensors cannot be placed on the simulated device.
        allow_real_gpu: Simulate even where a real GPU exists, for checks whose
            verdict must not depend on the machine (student code inside the block then
            sees only the simulated device).
        **device_options: Passed to :class:`SimulatedCuda` (bandwidths, ``virtual_time``).

    Yields:
        The :class:`SimulatedCuda`, whose :meth:`~SimulatedCuda.launch` enqueues work.

    Raises:
        RuntimeError: when a real CUDA device is present (the simulation would hide it).
    """
    if torch.cuda.is_available() and not allow_real_gpu:
        raise RuntimeError(
            "simulated_cuda() is for machines without a GPU; use the real device here "
            "(or pass allow_real_gpu=True for a machine-independent check)"
        )
    sim = SimulatedCuda(device_count, name, **device_options)
    event_cls = type("Event", (_SimEvent,), {"sim": sim})
    stream_cls = type(
        "Stream",
        (_SimStream,),
        {
            "__init__": lambda self, device=None, priority=0, **kw: _SimStream.__init__(
                self, sim, device, priority
            )
        },
    )
    available = device_count > 0
    patches = [
        mock.patch.object(torch.cuda, "is_available", lambda: available),
        mock.patch.object(torch.cuda, "device_count", lambda: device_count),
        mock.patch.object(torch.cuda, "synchronize", sim.synchronize),
        mock.patch.object(torch.cuda, "Event", event_cls),
        mock.patch.object(torch.cuda, "Stream", stream_cls),
        mock.patch.object(torch.cuda, "stream", sim.use_stream),
        mock.patch.object(torch.cuda, "current_stream", lambda device=None: sim.current),
        mock.patch.object(torch.cuda, "default_stream", lambda device=None: sim.default),
        mock.patch.object(torch.cuda, "current_device", lambda: 0),
        mock.patch.object(torch.cuda, "get_device_name", sim.get_device_name),
        mock.patch.object(torch.cuda, "get_device_properties", sim.get_device_properties),
        mock.patch.object(torch.cuda, "is_initialized", lambda: True),
        # The allocator bookkeeping has nothing to do here (and rejects simulated streams).
        mock.patch.object(torch.Tensor, "record_stream", lambda self, stream: None),
        mock.patch.object(torch.cuda, "memory_allocated", lambda device=None: sim.allocated),
        mock.patch.object(torch.cuda, "max_memory_allocated", lambda device=None: sim.peak),
        mock.patch.object(torch.cuda, "memory_reserved", lambda device=None: sim.reserved),
        mock.patch.object(torch.cuda, "max_memory_reserved", lambda device=None: sim.peak_reserved),
        mock.patch.object(torch.cuda, "reset_peak_memory_stats", sim.reset_peak),
        mock.patch.object(torch.cuda, "reset_max_memory_allocated", sim.reset_peak),
        mock.patch.object(torch.cuda, "memory_stats", sim.memory_stats),
        mock.patch.object(torch.cuda, "empty_cache", sim.empty_cache),
    ]
    if sim.virtual_time:
        patches += [
            mock.patch.object(time, "perf_counter", sim._host_clock_read),
            mock.patch.object(time, "monotonic", sim._host_clock_read),
            mock.patch.object(time, "time", sim._host_clock_read),
            mock.patch.object(time, "perf_counter_ns", lambda: int(sim._host_clock_read() * 1e9)),
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
        if transfers:
            stack.enter_context(_TransferMode(sim))
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
