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

  With ``transfers=True`` it also plays host-to-device copies: ``tensor.pin_memory()`` and
  ``pin_memory=True`` at tensor creation,
  ``tensor.to("cuda", non_blocking=...)`` and ``.cuda()`` return CPU tensors that the
  simulation tracks as device tensors, with the CUDA rules for overlap (CUDA C++
  Programming Guide, "Asynchronous Concurrent Execution"): a copy overlaps kernels only
  when its source is pinned and the copy is non-blocking; it then runs on the current
  stream and on the single host-to-device copy engine. Any other copy makes the host wait
  for the device and blocks it for the transfer. :meth:`SimulatedCuda.launch` with
  ``reads=`` reports a kernel that reads a tensor before its copy has landed. A 2-D matmul
  of device tensors becomes a kernel whose duration follows a simple Tensor Core model
  (:data:`SIM_MATMUL_TFLOPS`); its result has the right shape but no computed values.
  With ``virtual_time=True`` every timer a student may use reads the simulation's clock:
  ``time.perf_counter``/``monotonic``/``time``, ``timeit`` and
  ``torch.utils.benchmark.Timer`` (whose default timer synchronizes the device, as it does on
  a real GPU), and, through :meth:`SimulatedCuda.clocks_seen_by`, clock functions a
  student's code imported by name before the simulation started.
* :class:`SyncRecorder` is a :class:`torch.overrides.TorchFunctionMode` that records
  every tensor call which, on a GPU, makes the host wait for the device (``.item()``,
  ``.tolist()``, ``.cpu()``, ``bool(t)``, printing a tensor, boolean-mask indexing,
  ``F.one_hot`` without ``num_classes``, ...). On the CPU nothing waits, but the calls are
  the same, so a loop that would synchronize on a GPU is caught here too. Which calls wait is
  decided by :func:`host_read_reason` from each operator's semantics (does the host need a
  value of the data, or a size that depends on it?), the same rule the kernel model's traces
  follow. Blocking copies to the CPU (``t.to("cpu")``,
  ``cpu_tensor.copy_(t)``) are recorded when ``t`` is on another device: run the code on
  ``meta`` tensors to see them (see the class).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import time
import types
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from unittest import mock

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from grader.runtime.quiet import captured_stderr

#: The real clock functions, captured before any simulation patches ``time``: code that
#: imported one by name (``from time import perf_counter``) holds these objects.
_REAL_CLOCKS = (time.perf_counter, time.monotonic, time.time)

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
#: Host time a simulated matmul launch takes on the virtual clock, seconds, and how many
#: launches may wait in a stream's queue before a launch blocks the host until the oldest
#: finishes (a real GPU's launch queue is bounded too). Without them, a timer that never
#: synchronizes would measure 0 s per launch and ``benchmark.Timer``'s block-size search
#: would never end.
SIM_LAUNCH_S = 1e-6
SIM_QUEUE_DEPTH = 1024

#: The kernel model of ``simulated_cuda(kernels=True)``: every PyTorch operator on device
#: tensors is one kernel whose duration follows a roofline, ``max(FLOPs / peak, bytes /
#: bandwidth)`` plus a fixed minimum, and each launch costs the host ``SIM_KERNEL_LAUNCH_S``.
#: Orders of magnitude of an H100-class GPU (the datasheet's 3.35 TB/s HBM3; a few
#: microseconds per launch), not measurements.
SIM_HBM_GBPS = 3350.0
SIM_VECTOR_TFLOPS = 60.0  # non-matmul FLOPs (CUDA cores)
SIM_KERNEL_MIN_S = 2e-6
SIM_KERNEL_LAUNCH_S = 5e-6
#: CUDA's number for the default stream in traces; simulated stream ``i`` is ``7 + i``.
SIM_DEFAULT_STREAM = 7


@dataclass
class KernelRecord:
    """One simulated kernel or copy, for timelines: which stream, when, what."""

    stream: int
    label: str
    start: float  # perf_counter seconds
    end: float
    kind: str = "kernel"  # "kernel" or "memcpy" (a copy engine's work)
    nbytes: int = 0  # bytes moved (copies) or read and written (kernels of the kernel model)
    correlation: int = 0  # the host call that issued it (HostRecord.correlation)


@dataclass
class HostRecord:
    """One host-side interval for traces: a CUDA runtime call, a PyTorch operator or a
    ``record_function`` range (``cat`` as in a Kineto trace: ``cuda_runtime``, ``cpu_op``,
    ``user_annotation``)."""

    cat: str
    name: str
    start: float  # perf_counter seconds
    end: float
    correlation: int = 0


@dataclass
class Block:
    """A block of simulated device memory, as PyTorch's caching allocator keeps it.

    The allocator ties a block to the stream it was allocated on: when its tensor is freed,
    later allocations *on that stream* may reuse it at once (their work is ordered after the
    work already queued there), while work queued on other streams is not waited for, unless
    ``record_stream`` named those streams (PyTorch docs, *CUDA semantics*, "Use of multiple
    streams"; ``Tensor.record_stream``). Attributes: ``size`` (bytes), ``stream`` (id of the
    allocation stream), ``readers`` ((stream id, end time) of kernels that read it),
    ``recorded`` (streams named by ``record_stream``), ``reusable_at`` (with recorded streams:
    when the work queued on them at free time completes).
    """

    size: int
    stream: int
    readers: list = field(default_factory=list)
    recorded: set = field(default_factory=set)
    reusable_at: float = 0.0


@dataclass
class DeviceTensorInfo:
    """What the simulation knows about a tensor "on the device"."""

    stream: int
    ready_at: float  # perf_counter seconds when its copy (or producing kernel) completes
    pinned_source: bool
    non_blocking: bool
    seq: int  # order of the copy among all simulated transfers
    block: Block | None = None  # its memory (tensors that own simulated device memory)


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
    """A simulated kernel read a tensor before the work producing it had finished
    (``kind="read_before_ready"``), or memory was handed to new work while a kernel on another
    stream still read the tensor that had used it (``kind="reuse_while_read"``: the freed
    tensor's uses on other streams were not made known with ``record_stream``)."""

    def __init__(self, message: str, kind: str = "read_before_ready"):
        super().__init__(message)
        self.kind = kind


class SimulatedCuda:
    """A fake asynchronous CUDA device with streams, a copy engine, an allocator and a clock.

    Args:
        device_count: How many GPUs ``torch.cuda.device_count()`` reports.
        name: What ``torch.cuda.get_device_name()`` reports.
        h2d_gbps: Host-to-device bandwidth from pinned memory, GB/s.
        pageable_gbps: Bandwidth of copies from pageable memory (default: ``h2d_gbps``).
        pin_gbps: Rate at which ``pin_memory()`` copies into page-locked memory, GB/s
            (default: free).
        first_copy_ms: One-time cost, ms, added to the first host-to-device copy of each kind
            (from pinned memory, from pageable memory), as a real GPU's first copies pay for
            setting up the transfer path (lazy initialisation, the driver's staging buffers
            for pageable copies); the copies after it run at the link's bandwidth. A timing
            without a warm-up copy measures it. Default 0.
        virtual_time: Run on a virtual clock: waiting advances the clock instead of
            sleeping, and ``time.perf_counter``/``monotonic``/``time`` read it (each read
            advances it by 1 nanosecond, so no interval is ever zero). Results are then
            exact and instant; host computation takes no time.
        kernel_time_scale: The kernel model's kernels take this many times their roofline
            duration (a slower GPU): a check makes the device run far behind the host with it,
            as a compute-bound loop does, whatever the host does between launches.
    """

    def __init__(
        self,
        device_count: int = 1,
        name: str = "Simulated GPU (course stand-in)",
        *,
        h2d_gbps: float = SIM_H2D_GBPS,
        pageable_gbps: float | None = None,
        pin_gbps: float | None = None,
        first_copy_ms: float = 0.0,
        virtual_time: bool = False,
        kernel_time_scale: float = 1.0,
    ):
        if device_count < 0:
            raise ValueError(f"device_count must be >= 0, got {device_count}")
        self.device_count = device_count
        self.name = name
        self.h2d_gbps = h2d_gbps
        self.pageable_gbps = pageable_gbps or h2d_gbps
        self.pin_gbps = pin_gbps
        if first_copy_ms < 0:
            raise ValueError(f"first_copy_ms must be >= 0, got {first_copy_ms}")
        self.first_copy_ms = first_copy_ms
        self._copied_kinds: set[bool] = set()  # pinned-ness of the copies made so far
        self.virtual_time = virtual_time
        if kernel_time_scale <= 0:
            raise ValueError(f"kernel_time_scale must be > 0, got {kernel_time_scale}")
        self.kernel_time_scale = kernel_time_scale
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
        self.host_events: list[HostRecord] = []  # runtime calls, operators, ranges (traces)
        self._correlation = 0
        #: Host time one kernel launch takes (the kernel model of ``simulated_cuda(kernels=True)``
        #: sets it; 0 elsewhere, so the other chapters' timings are unchanged).
        self.launch_host_s = 0.0
        self.kernel_model = False
        self._host_side = 0  # > 0 while a host read runs its own tensor calls
        self._ranges: list[tuple[str, float]] = []
        self.pinned = _IdentityMap()
        self.on_device = _IdentityMap()
        self.t0 = self.now()
        # caching allocator: bytes in use, peak, reserved from the "driver", cached (free) part
        self.allocated = self.peak = self.reserved = self.peak_reserved = self.cached = 0
        self._blocks: dict[int, int] = {}
        self._next_block = 1
        # memory of device tensors, per allocation stream: freed blocks waiting for reuse
        self.free_blocks: list[Block] = []
        self.reuses = 0  # device-tensor allocations served by a freed block
        self.new_blocks = 0  # ... and by new memory

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

    def _synchronized_clock_read(self) -> float:
        """What ``torch.utils.benchmark``'s default timer does on a GPU: synchronize, then read."""
        self.synchronize()
        return self.now() if not self.virtual_time else self._host_clock_read()

    @contextlib.contextmanager
    def clocks_seen_by(self, fn):
        """Inside the block, the real clock functions that ``fn``'s module imported by name
        (``from time import perf_counter``, ``from timeit import default_timer``) read the
        virtual clock too (they were bound before the simulation patched ``time``). Nothing
        happens without ``virtual_time`` or for an object without ``__globals__``."""
        namespace = getattr(fn, "__globals__", None)
        reader = self._host_clock_read  # one bound method, so the restore below recognises it
        swapped = {}
        if self.virtual_time and isinstance(namespace, dict):
            for name, value in list(namespace.items()):
                if any(value is clock for clock in _REAL_CLOCKS):
                    swapped[name] = value
                    namespace[name] = reader
        try:
            yield
        finally:
            for name, value in swapped.items():
                if namespace.get(name) is reader:
                    namespace[name] = value

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

    # --- memory of device tensors, per stream (record_stream) -------------------------
    def _allocate(self, tensor: torch.Tensor, write_start: float) -> Block:
        """Give ``tensor`` a block on the current stream, reusing a freed one when the caching
        allocator would; raise if the reused block is still read on another stream."""
        size = max(512, -(-(tensor.numel() * tensor.element_size()) // 512) * 512)
        stream = self.current.id
        now = self.now()
        block = None
        for candidate in self.free_blocks:
            if (
                candidate.stream == stream
                and candidate.size >= size
                and (not candidate.recorded or candidate.reusable_at <= now)
            ):
                block = candidate
                break
        if block is not None:
            self.free_blocks.remove(block)
            self.reuses += 1
            late = [
                (s, end) for s, end in block.readers if s != stream and end > write_start + 1e-6
            ]
            if late:
                other, end = max(late, key=lambda item: item[1])
                message = (
                    f"memory freed while a kernel on stream {other} still read it was reused by "
                    f"new work on stream {stream}, {1000 * (end - write_start):.1f} ms before that "
                    "kernel finished: the tensor was allocated on one stream and used on another "
                    "without record_stream, so the caching allocator did not wait for the other "
                    "stream"
                )
                self.races.append(message)
                raise RaceError(message, kind="reuse_while_read")
            block.readers, block.recorded, block.reusable_at = [], set(), 0.0
        else:
            block = Block(size, stream)
            self.new_blocks += 1
        weakref.finalize(tensor, self._release, block)
        return block

    def _release(self, block: Block) -> None:
        """A device tensor was freed: its block waits for the streams ``record_stream`` named."""
        if block.recorded:
            block.reusable_at = max(
                [self.now()] + [s.busy_until for s in self.streams if s.id in block.recorded]
            )
        self.free_blocks.append(block)

    def record_stream(self, tensor: torch.Tensor, stream) -> None:
        """``tensor.record_stream(stream)``: the tensor's block, once freed, is not reused before
        the work queued on ``stream`` at that time completes. A tensor that is not on the
        simulated device raises as a CPU tensor does on a GPU machine (the operator has a CUDA
        kernel only, checked on torch 2.11 and 2.14).

        Raises:
            NotImplementedError: ``tensor`` is a host tensor."""
        if tensor not in self.on_device:
            raise NotImplementedError(
                "Could not run 'aten::record_stream' with arguments from the 'CPU' backend "
                "(simulated GPU: record_stream is for device tensors; this one is on the host)"
            )
        info = self.on_device.get(tensor)
        if info is not None and info.block is not None and hasattr(stream, "id"):
            if stream.id != info.block.stream:
                info.block.recorded.add(stream.id)

    def _register(
        self, tensor: torch.Tensor, ready_at: float, pinned: bool, non_blocking: bool, write_start
    ) -> None:
        info = DeviceTensorInfo(self.current.id, ready_at, pinned, non_blocking, self.transfers)
        info.block = self._allocate(tensor, write_start)
        self.on_device[tensor] = info

    # --- work -----------------------------------------------------------------------
    def launch(
        self,
        ms: float,
        *,
        reads: Iterable[torch.Tensor] = (),
        label: str = "kernel",
        stream=None,
        nbytes: int = 0,
    ) -> float:
        """Enqueue a kernel of ``ms`` milliseconds on a stream (default: the current one).

        Args:
            ms: Duration in milliseconds.
            reads: Device tensors the kernel reads; reading one before its producer
                finished is recorded in :attr:`races` (and raises :class:`RaceError`).
            label: Name shown on timelines.
            stream: A simulated stream; the current stream when None.
            nbytes: Bytes the kernel reads and writes (shown in traces).

        Returns:
            The ``perf_counter`` time at which the kernel will finish.

        Raises:
            ValueError: negative duration.
            RaceError: the kernel reads a tensor that is not ready when it starts.
        """
        if ms < 0:
            raise ValueError(f"kernel duration must be >= 0 ms, got {ms}")
        stream = stream or self.current
        host_start = self.now()
        if self.launch_host_s:
            self.sleep_until(host_start + self.launch_host_s)
        correlation = self._host_call("cudaLaunchKernel", host_start, self.now())
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
        for tensor in reads:
            info = self.on_device.get(tensor)
            if info is not None and info.block is not None:
                info.block.readers.append((stream.id, end))
        stream.busy_until = end
        self.kernels.append(
            KernelRecord(stream.id, label, start, end, "kernel", nbytes, correlation)
        )
        self.launches += 1
        return end

    def produce(self, tensor: torch.Tensor, ready_at: float | None = None) -> torch.Tensor:
        """Mark ``tensor`` as a device tensor written by the work queued so far on the current
        stream (memory allocated on that stream)."""
        ready = self.current.busy_until if ready_at is None else ready_at
        self._register(tensor, ready, False, True, write_start=min(ready, self.current.busy_until))
        return tensor

    def copy_to_device(
        self, src: torch.Tensor, non_blocking: bool, dst: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Play ``src.to("cuda", non_blocking=...)`` (or ``dst.copy_(src)``); return the
        tracked device tensor (a CPU tensor object the simulation tracks).

        A ``dst.copy_(src)`` between dtypes converts on the host first, into a new pageable
        tensor of ``dst``'s dtype, and copies that (PyTorch's ``copy_kernel_cuda``,
        aten/src/ATen/native/cuda/Copy.cu: "type conversions are performed on the CPU for
        CPU-GPU copies"): ``dst``'s bytes move, at the pageable rate."""
        if dst is not None and dst.dtype != src.dtype:
            src = src.to(dst.dtype)
        nbytes = src.numel() * src.element_size()
        pinned = src in self.pinned
        gbps = self.h2d_gbps if pinned else self.pageable_gbps
        ms = nbytes / (gbps * 1e9) * 1000.0
        if pinned not in self._copied_kinds:
            self._copied_kinds.add(pinned)
            ms += self.first_copy_ms
        if dst is None:
            out = src.detach().view_as(
                src
            )  # a new tensor object, no host copy: keeps timing honest
        else:
            with torch.no_grad():
                dst.copy_(src)
            out = dst
        self.transfers += 1
        host_start = self.now()
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
        correlation = self._host_call("cudaMemcpyAsync", host_start, self.now())
        self.kernels.append(
            KernelRecord(self.current.id, label, start, end, "memcpy", nbytes, correlation)
        )
        if dst is None:
            self._register(out, end, pinned, non_blocking, write_start=start)
        else:
            self.on_device[out] = DeviceTensorInfo(
                self.current.id,
                end,
                pinned,
                non_blocking,
                self.transfers,
                block=self._block_of(dst),
            )
        return out

    def _block_of(self, tensor: torch.Tensor) -> Block | None:
        info = self.on_device.get(tensor)
        return info.block if info is not None else None

    def matmul_tflops(self, dtype: torch.dtype, *dims: int) -> float:
        """The simulated throughput of a matmul of this dtype and these dimensions."""
        if dtype == torch.float32 and _tf32_matmuls():
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
        if a.dtype != b.dtype:  # as torch's matmul on any device (checked on 2.11 and 2.14)
            raise RuntimeError(
                f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}"
            )
        if k != k2:
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({m}x{k} and {k2}x{n})")
        ms = 2.0 * m * k * n / (self.matmul_tflops(a.dtype, m, k, n) * 1e12) * 1000.0
        queue = self.__dict__.setdefault("_matmul_queue", collections.deque())
        if self.virtual_time:
            while queue and queue[0] <= self.now():
                queue.popleft()
            if len(queue) >= SIM_QUEUE_DEPTH:  # the launch queue is full: wait for a slot
                self.sleep_until(queue.popleft())
        end = self.launch(ms, reads=(a, b), label="matmul")
        if self.virtual_time:
            queue.append(end)
            self._vclock += SIM_LAUNCH_S  # the kernel starts at once; the host returns later
        out = torch.empty(m, n, dtype=a.dtype)
        self._register(out, end, False, True, write_start=end - ms / 1000.0)
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
        """Register a freshly made tensor as living on the simulated device (allocated on the
        current stream; written when the work queued there so far is done)."""
        ready = max(self.now(), self.current.busy_until)
        self._register(tensor, ready, False, True, write_start=ready)
        return tensor

    def synchronize(self, *_args, **_kwargs) -> None:
        """Block until every stream is idle (``torch.cuda.synchronize``)."""
        self.synchronizations += 1
        start = self.now()
        self.sleep_until(self.completion_time())
        self._host_call("cudaDeviceSynchronize", start, self.now())

    # --- traces -----------------------------------------------------------------------
    def _host_call(self, name: str, start: float, end: float, cat: str = "cuda_runtime") -> int:
        """Record a host-side interval for traces; return its correlation id."""
        self._correlation += 1
        self.host_events.append(HostRecord(cat, name, start, end, self._correlation))
        return self._correlation

    def host_read(self, tensor: torch.Tensor, what: str) -> None:
        """The host reads a device tensor's value (``.item()``, ``print``, a boolean mask...):
        a device-to-host copy queued on the current stream, and the host waits for it
        (``cudaMemcpyAsync`` + ``cudaStreamSynchronize`` in a real trace)."""
        info = self.on_device.get(tensor)
        nbytes = tensor.numel() * tensor.element_size()
        host_start = self.now()
        correlation = self._host_call("cudaMemcpyAsync", host_start, host_start)
        start = max(host_start, self.current.busy_until, info.ready_at if info else 0.0)
        end = start + SIM_KERNEL_MIN_S
        self.current.busy_until = end
        self.kernels.append(
            KernelRecord(self.current.id, f"Memcpy DtoH ({what})", start, end, "memcpy", nbytes,
                         correlation)
        )  # fmt: skip
        self.synchronizations += 1
        self.sleep_until(end)
        self._host_call("cudaStreamSynchronize", host_start, self.now())

    def chrome_trace(self) -> list[dict]:
        """Everything so far as Chrome trace events, in the format ``torch.profiler`` writes
        (``export_chrome_trace``, Kineto): complete events (``"ph": "X"``) with ``ts`` and
        ``dur`` in microseconds; GPU work with ``"cat": "kernel"`` or ``"gpu_memcpy"`` and
        ``args.stream`` (``pid`` the device, ``tid`` the stream; the default stream is 7, as
        CUDA numbers it); host work with ``"cat": "cuda_runtime"``, ``"cpu_op"`` or
        ``"user_annotation"``; a runtime call and the GPU work it issued share
        ``args.correlation``. :mod:`grader.runtime.trace` reads it like a real trace."""
        events = []

        def us(t: float) -> float:
            return round((t - self.t0) * 1e6, 3)

        for k in self.kernels:
            stream = SIM_DEFAULT_STREAM + k.stream
            args = {"device": 0, "stream": stream, "correlation": k.correlation}
            if k.kind == "memcpy":
                args["bytes"] = k.nbytes
            events.append(
                {"ph": "X", "cat": "kernel" if k.kind == "kernel" else "gpu_memcpy",
                 "name": k.label, "pid": 0, "tid": stream, "ts": us(k.start),
                 "dur": round((k.end - k.start) * 1e6, 3), "args": args}
            )  # fmt: skip
        for h in self.host_events:
            args = {"correlation": h.correlation} if h.cat == "cuda_runtime" else {}
            events.append(
                {"ph": "X", "cat": h.cat, "name": h.name, "pid": 1, "tid": 1, "ts": us(h.start),
                 "dur": round((h.end - h.start) * 1e6, 3), "args": args}
            )  # fmt: skip
        return sorted(events, key=lambda e: e["ts"])

    def export_chrome_trace(self, path) -> None:
        """Write :meth:`chrome_trace` as a JSON file that Perfetto (ui.perfetto.dev) and
        ``chrome://tracing`` open, like ``torch.profiler``'s ``export_chrome_trace``, with
        metadata events (``"ph": "M"``) that name the tracks: process 0 ``simulated GPU``
        with one thread per stream (``stream 7`` is the default stream), process 1 ``host``.
        The top level carries ``"simulated": true``."""
        import json

        events = self.chrome_trace()
        streams = sorted({e["tid"] for e in events if e["pid"] == 0})
        names = [
            ("process_name", 0, 0, "simulated GPU (course stand-in)"),
            ("process_name", 1, 1, "host"),
        ]
        names += [("thread_name", 0, s, f"stream {s}") for s in streams]
        meta = [
            {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": label}}
            for kind, pid, tid, label in names
        ]
        with open(path, "w") as f:
            json.dump({"traceEvents": meta + events, "simulated": True}, f)

    def completion_time(self) -> float:
        """The ``perf_counter`` time at which all work queued so far completes."""
        return max([self.now(), self.copy_engine_free] + [s.busy_until for s in self.streams])

    def timeline(self) -> list[KernelRecord]:
        """Kernels and copies so far, times relative to the simulation's start (seconds)."""
        return [
            dataclasses.replace(k, start=k.start - self.t0, end=k.end - self.t0)
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


def _require_cuda_device(device: object) -> None:
    """Refuse a device that is not CUDA where ``torch.cuda``'s stream functions take one, with
    torch's own message (``torch.cuda._utils._get_device_index``: "Expected a cuda device, but
    got: cpu"); ``None`` and an index are the current or a numbered GPU."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {device}")


class _SimStream:
    """Stand-in for ``torch.cuda.Stream``: an in-order queue with its own clock."""

    def __init__(self, sim: SimulatedCuda, device=None, priority: int = 0):
        _require_cuda_device(device)
        self.sim = sim
        self.id = len(sim.streams)
        self.busy_until = sim.now()
        sim.streams.append(self)

    def synchronize(self) -> None:
        self.sim.synchronizations += 1
        start = self.sim.now()
        self.sim.sleep_until(self.busy_until)
        self.sim._host_call("cudaStreamSynchronize", start, self.sim.now())

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
        start = self.sim.now()
        self.sim.sleep_until(self.time)
        self.sim._host_call("cudaEventSynchronize", start, self.sim.now())

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
        if kwargs.get("pin_memory") is True and not _device_is_cuda(kwargs.get("device")):
            # torch.empty(n, pin_memory=True): made in ordinary memory, pinned as .pin_memory()
            kwargs = {k: v for k, v in kwargs.items() if k != "pin_memory"}
            return self.sim.pin(func(*args, **kwargs))
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
            and not self.sim.kernel_model
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


def _tf32_matmuls() -> bool:
    """Whether float32 matmuls may use TF32 now. Reads ``fp32_precision`` where it exists
    (torch >= 2.9): reading the legacy ``allow_tf32`` after ``fp32_precision`` was set raises."""
    matmul = torch.backends.cuda.matmul
    mode = getattr(matmul, "fp32_precision", "none")
    if mode in ("tf32", "ieee"):
        return mode == "tf32"
    try:
        return bool(matmul.allow_tf32)
    except RuntimeError:  # a mix of the legacy and new flags
        return False


def _timer_patches(sim: SimulatedCuda, *, virtual: bool = True) -> list:
    """Make ``timeit`` and ``torch.utils.benchmark.Timer`` read the virtual clock (with
    ``virtual=False``: only make torch's Timer synchronize the simulated GPU by default).

    ``timeit.Timer`` and torch's Timer bind their clock when they are defined (a default
    argument, a class attribute), so patching ``time`` alone does not reach them. Torch's
    default timer synchronizes the accelerator before reading the clock (torch >= 2.11 on a
    GPU; on a machine without one, torch 2.11 picked the plain clock when it was imported):
    in the simulation it always does, as on a real GPU. A clock passed explicitly
    (``timer=time.perf_counter``) reads the virtual clock without synchronizing, as it would
    on a GPU. In real time (``virtual=False``) torch's default timer still synchronizes the
    simulated GPU, whatever torch picked at import: torch 2.11 on a CPU-only machine picked
    the plain clock, and a Timer that never waits for the simulated kernels would grow its
    block size until the launch queue holds minutes of work.
    """
    import timeit

    # Imported here for the first time in most processes: it imports torch.utils.cpp_extension,
    # which logs "No CUDA runtime is found" to stderr on a machine without CUDA (quiet.py).
    with captured_stderr():
        from torch.utils.benchmark.utils import timer as bench_timer

    torch_default = bench_timer.timer
    real = (*_REAL_CLOCKS, timeit.default_timer)

    def plain(clock):
        if not virtual:
            return timeit.default_timer if clock is None else clock
        return sim._host_clock_read if clock is None or any(clock is c for c in real) else clock

    class SimTimeitTimer(timeit.Timer):
        def __init__(self, stmt="pass", setup="pass", timer=None, globals=None):
            super().__init__(stmt, setup, plain(timer), globals)

    class SimTorchTimeitTimer(timeit.Timer):
        def __init__(self, stmt="pass", setup="pass", timer=None, globals=None):
            clock = sim._synchronized_clock_read if timer is torch_default else plain(timer)
            super().__init__(stmt, setup, clock, globals)

    torch_timer = mock.patch.object(bench_timer.Timer, "_timer_cls", SimTorchTimeitTimer)
    if not virtual:
        return [torch_timer]
    return [
        mock.patch.object(timeit, "default_timer", sim._host_clock_read),
        mock.patch.object(timeit, "Timer", SimTimeitTimer),
        torch_timer,
    ]


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
    kernels: bool = False,
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
        kernels: The kernel model (implies ``transfers``): every PyTorch operator on device
            tensors runs (on the CPU, so values are real) and is also one simulated kernel on
            the current stream, with a roofline duration and a host launch cost; reading a
            device tensor's value from the host synchronizes. :meth:`SimulatedCuda.chrome_trace`
            then holds what a profiler would have recorded. Use with ``virtual_time=True``.
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
        mock.patch.object(
            torch.cuda,
            "current_stream",
            lambda device=None: _require_cuda_device(device) or sim.current,
        ),
        mock.patch.object(
            torch.cuda,
            "default_stream",
            lambda device=None: _require_cuda_device(device) or sim.default,
        ),
        mock.patch.object(torch.cuda, "current_device", lambda: 0),
        mock.patch.object(torch.cuda, "get_device_name", sim.get_device_name),
        mock.patch.object(torch.cuda, "get_device_properties", sim.get_device_properties),
        mock.patch.object(torch.cuda, "is_initialized", lambda: True),
        # record_stream is played by the simulated allocator (memory reuse across streams).
        mock.patch.object(
            torch.Tensor, "record_stream", lambda self, stream: sim.record_stream(self, stream)
        ),
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
            *_timer_patches(sim),
        ]
    else:
        patches += _timer_patches(sim, virtual=False)
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
        if transfers or kernels:
            stack.enter_context(_TransferMode(sim))
        if kernels:
            sim.kernel_model = True
            sim.launch_host_s = SIM_KERNEL_LAUNCH_S
            stack.enter_context(_KernelMode(sim))
            stack.enter_context(_HostReadMode(sim))
        yield sim


# --------------------------------------------------------------------------- what synchronizes
#: The words a message uses for the host reads a student meets most, by the call's name. For
#: messages only: whether a call synchronizes is decided by :func:`host_read_reason`.
SYNC_WORDS = {
    "item": ".item()",
    "tolist": ".tolist()",
    "numpy": ".numpy()",
    "__array__": "numpy.asarray(tensor)",
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
BOOLEAN_MASK = "boolean-mask indexing x[mask] (output size depends on the data)"
MASK_TO_INDICES = (
    "assigning a tensor through a boolean mask, x[mask] = value (the mask becomes indices, "
    "whose count depends on the data; x[mask] = 1.0 is a masked_fill and does not wait)"
)
HOST_INDEX = (
    "indexing a device tensor with an index tensor on the host (copied to the device from "
    "pageable memory first)"
)
#: What :class:`SyncRecorder` records for a blocking copy from a device tensor to the CPU.
TO_CPU = ".to('cpu') of a device tensor (a blocking device-to-host copy)"
COPY_TO_CPU = "cpu_tensor.copy_(device_tensor) (a blocking device-to-host copy)"
TENSOR_OF_TENSORS = "torch.tensor(list of device tensors) (copies each one to the host)"
#: ... and for ``torch.where`` with the condition alone (``torch.nonzero`` by another name).
WHERE_ONE_ARG = (
    "torch.where(condition) with one argument (= nonzero: output size depends on the data)"
)
#: The records that need a tensor on a device other than the CPU to be seen (see SyncRecorder).
DEVICE_TO_HOST = (TO_CPU, COPY_TO_CPU)

#: Python's protocols that hand a tensor's values to Python as text or as an array: what they
#: return is the data itself. FakeTensor cannot tell (it prints a placeholder of its own), so
#: these are the calls :func:`host_read_reason` knows by name.
HOST_CONVERSIONS = frozenset({"__repr__", "__format__", "numpy", "__array__"})


class _Unkeyable(Exception):
    """An argument that cannot be part of a cache key."""


def _key(value, is_device):
    """What a sync decision depends on: tensors by shape, dtype, device and placement, the
    other arguments by value (a tensor's data never enters)."""
    if isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape), value.dtype, value.device.type, bool(is_device(value)),
                value.requires_grad)  # fmt: skip
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key(v, is_device) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _key(v, is_device)) for k, v in sorted(value.items())))
    if isinstance(value, slice):
        return ("slice", value.start, value.stop, value.step)
    if value is None or value is Ellipsis or isinstance(
        value, (bool, int, float, complex, str, torch.dtype, torch.device, torch.layout,
                torch.memory_format)
    ):  # fmt: skip
        return (type(value).__name__, value)
    raise _Unkeyable


class _IndexTensors(TorchDispatchMode):
    """Watches the ATen operators of a fake run for the index tensors of advanced indexing (an
    operator argument of type ``Tensor?[]``) that the host must handle first:

    * a bool or uint8 mask, which CUDA turns into integer indices with ``nonzero`` (a count that
      depends on the data), except when one host value is assigned through one mask, which it
      runs as ``masked_fill`` (``canDispatchToMaskedFill`` in ATen's
      ``TensorAdvancedIndexing.cpp``): :attr:`kind` ``"mask"``;
    * integer indices on the host for a tensor on the device, copied to the device from pageable
      memory (a copy the host waits for): :attr:`kind` ``"host_index"``.
    """

    def __init__(self, device_fakes: set[int]):
        super().__init__()
        self.device_fakes = device_fakes  # ids of the fakes of device tensors
        self.kind: str | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.kind is None:
            self.kind = self._host_work(func, args, kwargs)
        return func(*args, **kwargs)

    def _host_work(self, func, args, kwargs) -> str | None:
        values = dict(kwargs)
        for i, arg in enumerate(func._schema.arguments):
            if i < len(args):
                values[arg.name] = args[i]
        indices = [
            index
            for arg in func._schema.arguments
            if str(arg.type) == "List[Optional[Tensor]]"
            for index in values.get(arg.name) or ()
            if isinstance(index, torch.Tensor)
        ]
        masks = [i for i in indices if i.dtype in (torch.bool, torch.uint8)]
        if masks:
            value = values.get("values")
            masked_fill = (
                isinstance(value, torch.Tensor)
                and value.numel() == 1
                and id(value) not in self.device_fakes
                and len(masks) == len(indices) == 1
            )
            return None if masked_fill else "mask"
        target = values.get("self")
        if id(target) in self.device_fakes and any(
            i.dim() > 0 and id(i) not in self.device_fakes for i in indices
        ):
            return "host_index"
        return None


def _fake_data_use(func, args, kwargs, is_device) -> str | None:
    """Run the call on FakeTensors (shapes, dtypes, no data) under ``FakeTensorMode`` with every
    other mode off; return ``"value"`` when PyTorch needs a value of the data on the host
    (``DataDependentOutputException``), ``"size"`` when an output's size depends on it
    (``DynamicOutputShapeException``), ``"mask"`` when a boolean index becomes indices and
    ``"host_index"`` when host indices are copied to the device (:class:`_IndexTensors`), else
    None (also when the call cannot run on fakes)."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        FakeTensorMode,
    )
    from torch.utils._python_dispatch import _disable_current_modes
    from torch.utils._pytree import tree_map

    mode = FakeTensorMode()
    device_fakes: set[int] = set()

    def fake(value):
        if not isinstance(value, torch.Tensor):
            return value
        made = mode.from_tensor(value)
        if is_device(value):
            device_fakes.add(id(made))
        return made

    watcher = _IndexTensors(device_fakes)
    state = torch.random.get_rng_state()
    try:
        with _no_function_modes(), _disable_current_modes():
            fake_args, fake_kwargs = tree_map(fake, (tuple(args), dict(kwargs)))
            name = getattr(func, "__name__", "")
            if (
                args
                and isinstance(args[0], torch.Tensor)
                and getattr(type(args[0]), name, None) is func
            ):
                func = getattr(fake_args[0], name)  # a method: FakeTensor's own, if it has one
                fake_args = fake_args[1:]
            with mode, watcher:
                func(*fake_args, **fake_kwargs)
    except DataDependentOutputException:
        return "value"
    except DynamicOutputShapeException:
        return "size"
    except Exception:  # noqa: BLE001 - a call fakes cannot run: judged by the other rules
        return None
    finally:
        torch.random.set_rng_state(state)
    return watcher.kind


_DECISIONS: dict = {}


@contextlib.contextmanager
def _no_function_modes():
    """Take every ``TorchFunctionMode`` off the stack inside the block (the simulation's own
    modes must not see a fake run), and put them back in order."""
    from torch.overrides import _get_current_function_mode_stack, _pop_mode, _push_mode

    stack = _get_current_function_mode_stack()
    for _ in stack:
        _pop_mode()
    try:
        yield
    finally:
        for mode in stack:
            _push_mode(mode)


def host_read_reason(func, args=(), kwargs=None, is_device=lambda t: True) -> str | None:
    """Why ``func(*args, **kwargs)`` makes the host wait for the device, or ``None``.

    A call on device tensors synchronizes when the host needs what only the device's data gives
    (the rule of ``torch.cuda.set_sync_debug_mode``, which reports the waits of a real GPU):

    * **a host value**: the call returns values of the data to Python (``.item()``,
      ``float(t)``, ``bool(t)`` and ``if t:``, ``.tolist()``, ``torch.equal`` of two tensors, printing, an
      f-string, ``.numpy()``) or needs one to go on (``F.one_hot(t)`` without ``num_classes``
      reads ``t.max()``; ``torch.arange(t)`` reads ``t``);
    * **a data-dependent size**: an output's size depends on the values (``nonzero``,
      ``argwhere``, ``unique``, ``masked_select``, ``bincount``, ``repeat_interleave`` with
      tensor repeats and no ``output_size``, ``x[mask]``, ``torch.where(condition)``), or a
      boolean mask must become integer indices (``x[mask] = tensor``);
    * **indices on the host**: a device tensor indexed with a host index tensor
      (``x[cpu_indices]``), which is copied to the device from pageable memory first.

    Decided by PyTorch's own semantics of each operator, not by a list of names: the call runs
    again on FakeTensors (what ``torch.compile`` traces with), where PyTorch raises
    ``DataDependentOutputException`` for a value the host would read and
    ``DynamicOutputShapeException`` for a size that depends on the data; index tensors are
    seen in the ATen call's ``Tensor?[]`` argument. What an operator's implementation reads on
    the host for its own convenience while neither its output sizes nor a returned value need
    it (``torch.histc`` with its default range on CUDA) is beyond this rule. Only Python's text and array protocols
    (:data:`HOST_CONVERSIONS`), which a FakeTensor answers with a placeholder, are known by
    name. Device-to-host copies (``.cpu()``, ``.to("cpu")``) depend on where tensors live and
    are judged by the callers. Decisions are cached by the arguments' shapes, dtypes, devices
    and the other arguments' values.

    Args:
        func: The tensor function or method (as ``__torch_function__`` receives it).
        args, kwargs: Its arguments.
        is_device: Whether a tensor lives on the device (default: every tensor, as when CPU
            tensors stand for GPU tensors).

    Returns:
        A description for messages (:data:`SYNC_WORDS`, or one made from the call's name), or
        None when the call does not make the host wait.
    """
    kwargs = kwargs or {}
    name = getattr(func, "__name__", "")
    if name == "__get__" or not any(is_device(t) for t in _tensors((args, kwargs))):
        return None  # attributes (shape, dtype, grad...) are metadata; no device data
    if name in HOST_CONVERSIONS:
        return SYNC_WORDS[name]
    if name == "equal" and len(args) >= 2 and args[0] is args[1]:
        return None  # one tensor compared with itself: True without reading it (torch 2.11, H200)
    try:
        key = (func, _key(tuple(args), is_device), _key(kwargs, is_device))
        hash(key)
    except (_Unkeyable, TypeError):
        key = None
    if key is not None and key in _DECISIONS:
        kind = _DECISIONS[key]
    else:
        kind = _fake_data_use(func, args, kwargs, is_device)
        if key is not None:
            _DECISIONS[key] = kind
    if kind is None:
        return None
    if kind == "mask":
        return MASK_TO_INDICES
    if kind == "host_index":
        return HOST_INDEX
    if name == "__getitem__":
        return BOOLEAN_MASK
    if name == "where":
        return WHERE_ONE_ARG
    if name in SYNC_WORDS:
        return SYNC_WORDS[name]
    what = (
        "reads a value of the data on the host"
        if kind == "value"
        else ("output size depends on the data")
    )
    return f"{_call_name(func)} ({what})"


def _call_name(func) -> str:
    """``torch.bincount``, ``Tensor.repeat_interleave``, ``one_hot``: how messages name a call."""
    name = getattr(func, "__name__", repr(func))
    qualname = getattr(func, "__qualname__", "") or ""
    if qualname.startswith(("Tensor.", "TensorBase.", "_TensorBase.")):
        return f"Tensor.{name}"
    if getattr(torch, name, None) is func:
        return f"torch.{name}"
    if getattr(torch.nn.functional, name, None) is func:
        return f"F.{name}"
    return name


class SyncRecorder(TorchFunctionMode):
    """Record the tensor calls that would synchronize the host with a GPU.

    Use as a context manager; afterwards :attr:`calls` lists the descriptions of the
    synchronizing calls made inside, in order. Every tensor stands for a GPU tensor, whatever its
    device: a call is recorded when :func:`host_read_reason` says that on a GPU it makes the host
    wait (``.item()``, ``bool(t)``, printing, ``x[mask]``, ``torch.nonzero``,
    ``F.one_hot`` without ``num_classes``, ...), and so are ``.cpu()``,
    ``torch.tensor(list of tensors)`` and blocking copies from a device to the CPU:

    * ``t.to("cpu")``, ``t.to(device="cpu")``, ``t.to(torch.device("cpu"))``,
      ``t.to(cpu_tensor)`` (:data:`TO_CPU`) and ``cpu_tensor.copy_(t)`` (:data:`COPY_TO_CPU`)
      when ``t`` lives on a device other than the CPU. A move to the device a tensor already
      lives on, a dtype change and ``t.to("cpu", non_blocking=True)`` (which copies into
      pinned memory without waiting) are not recorded, nor is ``copy_`` with
      ``non_blocking=True`` into a pinned CPU tensor.

    A copy is a device change only when the source is not on the CPU, so to see these, run the
    code on tensors of PyTorch's ``meta`` device (shapes and dtypes, no data), which stands for
    the GPU here: the recorder then replaces every copy of a meta tensor to the CPU (recorded
    or not), which could not read data that a meta tensor does not have, by an uninitialised
    CPU tensor of the right shape and dtype, so the code runs on and every such copy is
    counted. (``.item()`` and the like still raise on meta tensors after being recorded.)
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "cpu" and args and isinstance(args[0], torch.Tensor):
            self.calls.append(SYNC_WORDS["cpu"])
            if _is_meta(args[0]):
                return _stand_in(args[0], args[0].dtype)
        elif name == "to" and args and isinstance(args[0], torch.Tensor):
            target = _to_target(args, kwargs)
            if target is not None and _blocking_to_host(args[0], *target):
                self.calls.append(TO_CPU)
            if target is not None and _is_meta(args[0]) and _is_cpu(target[0]):
                return _stand_in(args[0], target[1] or args[0].dtype)
        elif name == "copy_" and len(args) > 1:
            if _is_copy_to_host(args, kwargs):
                self.calls.append(COPY_TO_CPU)
            if _is_meta(args[1]) and isinstance(args[0], torch.Tensor) and _is_cpu(args[0].device):
                return args[0]
        elif name in ("tensor", "as_tensor") and _tensors(args[:1]):
            self.calls.append(TENSOR_OF_TENSORS)
        else:
            reason = host_read_reason(func, args, kwargs)
            if reason is not None:
                self.calls.append(reason)
        return func(*args, **kwargs)

    def summary(self) -> str:
        """The recorded calls with counts, e.g. ``".item() x4, float(tensor) x1"``."""
        return summarize(self.calls)


def summarize(calls: list[str]) -> str:
    """Recorded calls with counts, in order of first appearance: ``".item() x4, ..."``."""
    counts: dict[str, int] = {}
    for call in calls:
        counts[call] = counts.get(call, 0) + 1
    return ", ".join(f"{call} x{n}" for call, n in counts.items())


def _is_meta(tensor) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type == "meta"


def _is_cpu(device) -> bool:
    return device is not None and torch.device(device).type == "cpu"


def _stand_in(src: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """What a copy of a meta tensor to the CPU returns under the recorder: no data to copy."""
    return torch.empty(src.shape, dtype=dtype, device="cpu")


def _to_target(args, kwargs):
    """``(device, dtype, non_blocking)`` of a ``Tensor.to`` call, or None when the arguments
    are not a valid ``to`` call (the call itself then raises)."""
    try:
        device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args[1:], **kwargs)
    except (TypeError, RuntimeError, ValueError):
        return None
    return device, dtype, bool(non_blocking)


def _blocking_to_host(src: torch.Tensor, device, dtype, non_blocking: bool) -> bool:
    """Whether ``src.to(device, dtype, non_blocking)`` is a device-to-host copy that makes the
    host wait: the target is the CPU, the source is not, and the copy is blocking (a
    non-blocking one from a GPU lands in pinned memory and returns at once)."""
    return _is_cpu(device) and src.device.type != "cpu" and not non_blocking


def _is_copy_to_host(args, kwargs) -> bool:
    """Whether ``dst.copy_(src, non_blocking)`` copies a device tensor into a CPU tensor in a
    way that makes the host wait (anything but a non-blocking copy into pinned memory)."""
    dst, src = args[0], args[1]
    if not (isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor)):
        return False
    if dst.device.type != "cpu" or src.device.type == "cpu":
        return False
    non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False) is True
    if non_blocking:
        try:
            return not dst.is_pinned()
        except RuntimeError:  # no accelerator to ask: nothing is pinned
            return True
    return True


# --------------------------------------------------------------------------- kernel model
#: Operators that launch no kernel: metadata, allocation, and the host read itself.
_NO_KERNEL = {
    "detach", "alias", "lift_fresh", "empty", "empty_like", "empty_strided", "_local_scalar_dense",
    "set_", "resize_", "sym_size", "sym_stride", "sym_numel", "is_nonzero", "_reshape_alias",
    "_record_function_enter", "_record_function_enter_new", "_record_function_exit",
}  # fmt: skip


def _tensors(tree) -> list[torch.Tensor]:
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _written_args(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors an operator writes in place (``out[i] = v`` writes ``out`` through a view)."""
    written = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            written += _tensors(value)
    return written


def _kernel_seconds(func, args, kwargs, out, inputs, outputs) -> tuple[float, int]:
    """Duration of one operator's kernel on the simulated device (a roofline), and its bytes."""
    from torch.utils.flop_counter import flop_registry

    nbytes = sum(t.numel() * t.element_size() for t in inputs + outputs)
    packet = func.overloadpacket
    dtype = outputs[0].dtype if outputs else torch.float32
    if packet in flop_registry:
        flops = flop_registry[packet](*args, **kwargs, out_val=out)
        peak = SIM_MATMUL_TFLOPS.get(dtype, SIM_MATMUL_TFLOPS[torch.float32])
    else:
        flops = max([t.numel() for t in outputs], default=0)
        peak = SIM_VECTOR_TFLOPS
    seconds = max(flops / (peak * 1e12), nbytes / (SIM_HBM_GBPS * 1e9))
    return SIM_KERNEL_MIN_S + seconds, nbytes


class _KernelMode(TorchDispatchMode):
    """The kernel model: each operator (after autograd, as ATen runs it) that reads a tensor on
    the simulated device is one kernel on the current stream, its outputs live on the device
    and are ready when it ends; views and metadata launch nothing. ``record_function`` ranges
    become ``user_annotation`` events."""

    def __init__(self, sim: SimulatedCuda):
        super().__init__()
        self.sim = sim

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        sim = self.sim
        name = func.__name__.split(".")[0]
        if name in ("_record_function_enter", "_record_function_enter_new"):
            sim._ranges.append((str(args[0]), sim.now()))
        elif name == "_record_function_exit" and sim._ranges:
            label, start = sim._ranges.pop()
            sim._host_call(label, start, sim.now(), cat="user_annotation")
        out = func(*args, **kwargs)
        if sim._host_side:
            return out
        inputs = _tensors((args, kwargs))
        on_device = [t for t in inputs if t in sim.on_device]
        if not on_device:
            return out
        outputs = _tensors(out)
        if func.is_view or name in _NO_KERNEL:
            ready = max(sim.on_device.get(t).ready_at for t in on_device)
            for t in outputs:
                if t not in sim.on_device:
                    sim.on_device[t] = DeviceTensorInfo(sim.current.id, ready, False, True, 0)
            return out
        seconds, nbytes = _kernel_seconds(func, args, kwargs, out, inputs, outputs)
        seconds *= sim.kernel_time_scale
        host_start = sim.now()
        end = sim.launch(seconds * 1000.0, reads=on_device, label=f"{name} (simulated kernel)",
                         nbytes=nbytes)  # fmt: skip
        sim._host_call(f"aten::{name}", host_start, sim.now(), cat="cpu_op")
        written = outputs + _written_args(func, args, kwargs)
        for t in written + [t._base for t in written if t._base is not None]:
            info = sim.on_device.get(t)
            if info is None:
                sim.on_device[t] = DeviceTensorInfo(sim.current.id, end, False, True, 0)
            else:
                info.ready_at = max(info.ready_at, end)
        return out


class _HostReadMode(TorchFunctionMode):
    """The kernel model's host reads: a call on device tensors that :func:`host_read_reason`
    says makes the host wait (``.item()``, ``bool(t)``, printing, ``.tolist()``, ``x[mask]``,
    ``nonzero``, ``F.one_hot`` without ``num_classes``...), a blocking copy to the host
    (``.cpu()``, ``.to("cpu")``, ``host.copy_(device_tensor)``) or a host tensor built from
    device tensors (``torch.tensor(list of device tensors)``) makes the host wait for the
    device, as on a GPU, and shows in the trace as a device-to-host copy and a
    ``cudaStreamSynchronize``. A call that needed a size or a value from the device runs on the
    device afterwards (its outputs are device tensors); a copy or a conversion to the host runs
    on the host."""

    def __init__(self, sim: SimulatedCuda):
        super().__init__()
        self.sim = sim

    def _device(self, value) -> torch.Tensor | None:
        for t in _tensors(value):
            if t in self.sim.on_device:
                return t
        return None

    def _to_host(self, name: str, args, kwargs) -> str | None:
        """A blocking copy of a device tensor into host memory, described; or None."""
        if name == "cpu" and args and args[0] in self.sim.on_device:
            return SYNC_WORDS["cpu"]
        if name == "to" and args and isinstance(args[0], torch.Tensor):
            target = _to_target(args, kwargs)
            if target is not None and _is_cpu(target[0]) and not target[2]:
                return TO_CPU
        if name == "copy_" and len(args) > 1 and isinstance(args[0], torch.Tensor):
            dst, src = args[0], args[1]
            if dst not in self.sim.on_device and src in self.sim.on_device:
                non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
                if not (non_blocking is True and dst in self.sim.pinned):
                    return COPY_TO_CPU
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        sim = self.sim
        if sim._host_side:
            return func(*args, **kwargs)
        tensor = self._device((args, kwargs))
        if tensor is None:
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        on_host = self._to_host(name, args, kwargs)
        if on_host is None and name in HOST_CONVERSIONS:
            on_host = SYNC_WORDS[name]
        if on_host is not None:  # the data goes to the host: runs there
            sim.host_read(tensor, on_host.split(" ")[0])
            sim._host_side += 1
            try:
                out = func(*args, **kwargs)
                if name in ("to", "cpu") and out is args[0]:
                    out = args[0].clone()  # a host copy: no longer a device tensor
                return out
            finally:
                sim._host_side -= 1
        reason = host_read_reason(func, args, kwargs, is_device=lambda t: t in sim.on_device)
        if reason is not None:  # the host read a size or a value; the op runs on the device
            sim.host_read(tensor, reason.split(" ")[0])
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        inputs = {id(t) for t in _tensors((args, kwargs))}
        built = [t for t in _tensors(out) if id(t) not in inputs and t not in sim.on_device]
        if built and name != "__get__":  # a host tensor made from device data, e.g. torch.tensor
            sim.host_read(tensor, "torch.tensor")
        return out
