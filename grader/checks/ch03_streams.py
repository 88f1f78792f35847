"""Checks for 03_streams: prefetch_to_device, run_on_streams.

The checks reach the student's functions through :mod:`grader.runtime.remote`: the ``_probe_*``
functions below run where the student's code lives (under autograde, in their kernel) and hand
back what they observed as plain data; every verdict is made in the checks.

The CPU checks run the student's code on the simulated GPU of :mod:`grader.runtime.simulate` (with
``allow_real_gpu=True``, so the verdict is the same on every machine): copies and kernels take
real milliseconds there, streams run concurrently, a copy overlaps only from pinned memory with
``non_blocking=True`` on a side stream, a kernel that reads a tensor before its copy landed is
caught, and the caching allocator reuses a freed tensor's memory for new work on the stream it
was allocated on unless ``record_stream`` named the other streams that still use it (a
neighbour's allocation on that stream then overwrites a batch that is still being read). The
``_cuda`` checks time real kernels, the student's code in their process and the reference here.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator

import torch

from grader.checks.common import call_student, cuda_or_not_checked, fail, passed, require
from grader.runtime.course import reference
from grader.runtime.remote import student
from grader.runtime.simulate import RaceError, simulated_cuda

ASSIGNMENT = "03_streams"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True

#: Overlap must bring the prefetched loop to at most this fraction of the serial one.
#: Reference figure: 0.60 on the simulated GPU (20 ms copies, 20 ms compute, 6 batches).
MAX_PREFETCH_RATIO = 0.8
#: Kernels on their own streams against the same run one after another. Reference: ~0.26 for
#: four 50 ms kernels on a real GPU, ~0.33 on the simulated GPU (:data:`STREAM_KERNELS_MS`).
MAX_STREAMS_RATIO = 0.6


# --------------------------------------------------------------------------- prefetch_to_device
def _batches(n: int = 6, elements: int = 1_250_000) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(elements, generator=g), torch.arange(4) + 10 * i) for i in range(n)]


def _checksums(batches) -> list[list[float]]:
    return [[float(t.double().sum()) for t in batch] for batch in batches]


def _summary(batch) -> dict:
    """A yielded batch as plain data: its type, and per tensor device, shape, dtype and sum."""
    if not isinstance(batch, tuple):
        return {"type": type(batch).__name__, "tensors": []}
    tensors = []
    for t in batch:
        if not isinstance(t, torch.Tensor):
            tensors.append({"type": type(t).__name__})
            continue
        tensors.append(
            {
                "type": "Tensor",
                "device": t.device.type,
                "shape": tuple(t.shape),
                "dtype": t.dtype,
                "sum": None if t.device.type == "meta" else float(t.detach().double().sum()),
            }
        )
    return {"type": "tuple", "tensors": tensors}


def _probe_prefetch_plain(
    prefetch_to_device, n: int, elements: int, device: str, as_given: bool = False,
    gpu: bool = False,
) -> dict:  # fmt: skip
    """Probe: what prefetch_to_device yields for small batches to a device that is not CUDA.
    ``as_given``: the batches as a list and the device as a string (the statement allows any
    iterable and either form); else an iterator and a ``torch.device``. ``gpu``: on the
    simulated GPU, so CUDA is available but the target is not CUDA."""
    batches = _batches(n, elements)
    source, target = (batches, device) if as_given else (iter(batches), torch.device(device))
    context = (
        simulated_cuda(transfers=True, allow_real_gpu=True) if gpu else contextlib.nullcontext()
    )
    with context as sim:
        out = prefetch_to_device(source, target)
        if not isinstance(out, Iterator):
            return {"iterator": False, "type": type(out).__name__, "batches": []}
        got = [_summary(b) for b in out]
        return {
            "iterator": True,
            "type": type(out).__name__,
            "batches": got,
            "to_gpu": sim.transfers if sim is not None else 0,
        }


def _require_same_batches(seen: dict, batches, device_type: str) -> None:
    require(
        seen["iterator"],
        "prefetch_to_device must return an iterator (write it as a generator)",
        yours=seen["type"],
        expected="a generator",
        cause="use `yield` inside the function",
    )
    got = seen["batches"]
    require(
        len(got) == len(batches),
        "prefetch_to_device must yield every batch once",
        yours=len(got),
        expected=len(batches),
        cause="yield one batch per input batch, including the last one",
    )
    expected_sums = _checksums(batches)
    for i, (g, b) in enumerate(zip(got, batches)):
        require(
            g["type"] == "tuple" and len(g["tensors"]) == len(b),
            f"batch {i} must be a tuple like the input",
            yours=g["type"],
            expected=f"tuple of {len(b)} tensors",
            cause="yield tuple(tensor.to(device) for tensor in batch)",
        )
        for j, (t, ref, ref_sum) in enumerate(zip(g["tensors"], b, expected_sums[i])):
            require(
                t["type"] == "Tensor" and t["device"] == device_type,
                f"batch {i}[{j}] is on the wrong device",
                yours=t.get("device", t["type"]),
                expected=device_type,
                cause="move every tensor of the batch to `device`",
            )
            require(
                t["shape"] == tuple(ref.shape) and t["dtype"] == ref.dtype,
                f"batch {i}[{j}] changed shape or dtype",
                yours=(t["shape"], t["dtype"]),
                expected=(tuple(ref.shape), ref.dtype),
                cause="only move the tensors",
            )
            if device_type != "meta":
                require(
                    t["sum"] is not None and abs(t["sum"] - ref_sum) <= 1e-6 * (1 + abs(ref_sum)),
                    f"batch {i}[{j}] has different values",
                    yours="different values",
                    expected="the input's values",
                    cause="yield the batches in input order, unchanged",
                )


def _probe_prefetch_simulated(prefetch_to_device, compute_ms: float) -> dict:
    """Probe: a serial loop and a loop over the student's prefetcher on the simulated GPU
    (copies of 5 MB take 20 ms), with a ``compute_ms`` kernel per batch that reads it."""
    batches = _batches()
    with simulated_cuda(transfers=True, allow_real_gpu=True) as sim:
        t0 = time.perf_counter()
        for batch in batches:  # the serial baseline: a blocking copy, then compute
            sim.launch(compute_ms, reads=tuple(t.to("cuda") for t in batch), label="compute")
        sim.synchronize()
        serial = time.perf_counter() - t0

        got, race = [], None
        t0 = time.perf_counter()
        try:
            for batch in prefetch_to_device(batches, "cuda:0"):  # a list, a string: any iterable
                sim.launch(compute_ms, reads=batch, label="compute")
                got.append(batch)
        except RaceError as err:
            race = str(err)
        sim.synchronize()
        prefetched = time.perf_counter() - t0
        transfers = []
        for batch in got:  # read after the timed loop: host work would distort its time
            for t in batch:
                info = sim.on_device.get(t)
                transfers.append(
                    None
                    if info is None
                    else {
                        "pinned": info.pinned_source,
                        "non_blocking": info.non_blocking,
                        "stream": info.stream,
                    }
                )
        summaries = [_summary(tuple(t.detach() for t in batch)) for batch in got]
    return {
        "serial": serial,
        "prefetched": prefetched,
        "race": race,
        "batches": summaries,
        "transfers": transfers,
    }


def _probe_prefetch_launch_bound(prefetch_to_device, host_ms: float) -> dict:
    """Probe: a launch-bound consumer on the simulated GPU (virtual clock): per batch,
    ``host_ms`` of host work (Python launching kernels) and then one 1 ms kernel that reads
    the batch. The copy of batch i+1 overlaps only with the consumer's host work, so a
    prefetcher that makes the host wait for its copies (``stream.synchronize()``,
    ``torch.cuda.synchronize()``, ``event.synchronize()``) gains nothing, even though it
    overlaps when the consumer's kernels are long. With ``host_ms`` shorter than a copy
    (20 ms) the copies set the pace and the host runs ahead of them, so a consumer stream
    that waited for the first copy only reads a later batch before it lands (with copies
    exactly as long as the consumer's work, each would land just in time)."""
    batches = _batches()
    with simulated_cuda(transfers=True, allow_real_gpu=True, virtual_time=True) as sim:

        def consume(batch) -> None:
            sim.sleep_until(sim.now() + host_ms / 1000.0)  # the consumer's host work
            sim.launch(1, reads=batch, label="small kernel")

        t0 = sim.now()
        for batch in batches:  # the serial baseline: a blocking copy, then the consumer
            consume(tuple(t.to("cuda") for t in batch))
        sim.synchronize()
        serial = sim.now() - t0
        t0 = sim.now()
        try:
            for batch in prefetch_to_device(batches, "cuda:0"):  # a list, a string: any iterable
                consume(batch)
        except RaceError as err:
            return {"race": str(err), "serial": serial, "prefetched": None}
        sim.synchronize()
        prefetched = sim.now() - t0
    return {"race": None, "serial": serial, "prefetched": prefetched}


def _allocation_streams(sim, tensors) -> set[int]:
    """The streams the simulated allocator gave these tensors' memory on."""
    out = set()
    for t in tensors:
        info = sim.on_device.get(t)
        if info is not None and info.block is not None:
            out.add(info.block.stream)
    return out


def _probe_prefetch_memory(prefetch_to_device) -> dict:
    """Probe: memory safety on the simulated GPU (virtual clock): each batch is read by a
    kernel slower than its copy and then dropped, and after the loop another user of the copy
    streams allocates there (PyTorch hands out pooled streams). Without ``record_stream`` the
    allocator reuses a batch's memory while its kernel still reads it."""
    batches = _batches(6, 625_000)  # 2.5 MB: 10 ms copies; 40 ms compute
    with simulated_cuda(transfers=True, allow_real_gpu=True, virtual_time=True) as sim:
        streams: set[int] = set()
        try:
            for batch in prefetch_to_device(batches, "cuda:0"):  # a list, a string: any iterable
                sim.launch(40, reads=batch, label="compute")
                streams |= _allocation_streams(sim, batch)
                del batch
            gc.collect()
            for stream_id in sorted(streams):  # a neighbour's work on the same pooled stream
                with torch.cuda.stream(sim.streams[stream_id]):
                    sim.device_tensor(torch.empty(625_000))
        except RaceError as err:
            return {"race": str(err), "kind": err.kind}
    return {"race": None, "kind": None}


def check_prefetch_to_device(prefetch_to_device) -> None:
    """Check values and order without CUDA, then overlap and safety on the simulated GPU.

    Raises:
        CheckFailed: wrong values or order, a read before the copy landed, no overlap
            (pageable memory, the default stream, or blocking copies) with a compute-bound
            or a launch-bound consumer (the host waits for the copies), or a batch's memory
            reused while it is still read (no ``record_stream``).
    """
    prefetch_to_device = student(prefetch_to_device, "prefetch_to_device")
    plain = _batches(3, 1000)
    for device, as_given, gpu, label in (
        ("cpu", True, False, "a list of batches, 'cpu'"),
        ("meta", False, False, "iter(batches), torch.device('meta')"),
        ("cpu", False, True, "iter(batches), torch.device('cpu') on a machine with a (simulated) GPU"),
    ):  # fmt: skip
        seen = call_student(
            prefetch_to_device.probe, _probe_prefetch_plain, 3, 1000, device, as_given, gpu,
            name=f"prefetch_to_device({label})",
        )  # fmt: skip
        _require_same_batches(seen, plain, device)
        require(
            seen.get("to_gpu", 0) == 0,
            f"prefetch_to_device({label}) copied tensors to the GPU",
            yours=f"{seen.get('to_gpu')} copies to the GPU",
            expected=f"every batch moved to {device!r}, no copy to the GPU",
            cause="take the stream path only when `device` is a CUDA device and CUDA is "
            "available: `if device.type != 'cuda' or not torch.cuda.is_available():` move each "
            "batch with .to(device)",
        )

    batches = _batches()
    compute_ms = 20.0
    seen = call_student(
        prefetch_to_device.probe, _probe_prefetch_simulated, compute_ms,
        name="prefetch_to_device(batches, 'cuda:0') on the simulated GPU",
    )  # fmt: skip
    if seen["race"]:
        fail(
            "a batch was used before its copy to the GPU had finished (simulated GPU)",
            yours=seen["race"],
            expected="the consumer's stream waits for the copy stream before the batch is yielded",
            cause="call torch.cuda.current_stream().wait_stream(copy_stream) (or wait on an event "
            "recorded after the copy) before yielding the batch",
        )
    transfers = seen["transfers"]
    require(
        all(info is not None for info in transfers),
        "every yielded tensor must be on the device",
        yours=f"{sum(i is None for i in transfers)} tensor(s) not moved",
        expected="all moved with .to(device, non_blocking=True)",
        cause="move each tensor of the batch to `device`",
    )
    _require_same_batches(
        {"iterator": True, "type": "generator", "batches": seen["batches"]}, batches, "cpu"
    )
    ratio = seen["prefetched"] / seen["serial"]
    if ratio > MAX_PREFETCH_RATIO:
        if not all(i["pinned"] for i in transfers):
            cause = "the copies come from pageable memory, which cannot overlap with kernels: pin each tensor first (tensor.pin_memory())"
        elif not all(i["non_blocking"] for i in transfers):
            cause = "pass non_blocking=True, or the host waits for every copy"
        elif any(i["stream"] == 0 for i in transfers):
            cause = "the copies are issued on the default stream, behind the compute: issue them inside `with torch.cuda.stream(copy_stream):`"
        else:
            cause = "issue the copy of batch i+1 before yielding batch i, so it runs while batch i is used"
        fail(
            "prefetching must overlap the copy of the next batch with the compute on this one (simulated GPU)",
            yours=f"{1000 * seen['prefetched']:.0f} ms, {ratio:.2f}x the serial {1000 * seen['serial']:.0f} ms",
            expected=f"at most {MAX_PREFETCH_RATIO}x the serial time (reference: about 0.6x)",
            cause=cause,
        )
    host_ms = compute_ms / 2
    launch_bound = call_student(
        prefetch_to_device.probe, _probe_prefetch_launch_bound, host_ms,
        name="prefetch_to_device(batches, 'cuda:0') with a launch-bound consumer (simulated GPU)",
    )  # fmt: skip
    if launch_bound["race"]:
        fail(
            "a batch was used before its copy to the GPU had finished (simulated GPU, "
            "launch-bound consumer)",
            yours=launch_bound["race"],
            expected="the consumer's stream waits for the copy stream before the batch is yielded",
            cause="call torch.cuda.current_stream().wait_stream(copy_stream) before yielding "
            "each batch (every one: a wait before the first batch orders only the copies "
            "issued before it)",
        )
    host_ratio = launch_bound["prefetched"] / launch_bound["serial"]
    require(
        host_ratio <= MAX_PREFETCH_RATIO,
        "prefetching must also overlap the copy of the next batch with the consumer's host "
        f"work ({host_ms:.0f} ms of Python per batch, then a 1 ms kernel; simulated GPU)",
        yours=f"{1000 * launch_bound['prefetched']:.0f} ms, {host_ratio:.2f}x the serial "
        f"{1000 * launch_bound['serial']:.0f} ms",
        expected=f"at most {MAX_PREFETCH_RATIO}x the serial time (reference: about 0.65x)",
        cause="the host waits for the copies: a stream.synchronize(), event.synchronize() or "
        "torch.cuda.synchronize() in the prefetcher blocks Python until the copy lands, so the "
        "consumer cannot work meanwhile. Make the consumer's stream wait instead "
        "(torch.cuda.current_stream().wait_stream(copy_stream)): the GPU orders the work and the "
        "host runs ahead",
    )
    memory = call_student(
        prefetch_to_device.probe, _probe_prefetch_memory,
        name="prefetch_to_device(batches, 'cuda:0') with slow consumers (simulated GPU)",
    )  # fmt: skip
    if memory["race"]:
        fail(
            "a yielded batch's memory was handed to new work while the consumer still read it "
            "(simulated caching allocator)",
            yours=memory["race"],
            expected="each yielded tensor marked as used by the consumer's stream",
            cause="the batch was allocated on the copy stream and is used on the consumer's: call "
            "t.record_stream(torch.cuda.current_stream()) on every tensor you yield, so the "
            "allocator waits for the consumer's work before reusing its memory",
        )
    passed(
        f"prefetch_to_device yields the right batches, overlaps copies with compute ({ratio:.2f}x serial on the simulated GPU) and keeps their memory safe"
    )


def _sleep_cycles_per_ms() -> float:
    """Calibrate torch.cuda._sleep: GPU clock cycles per millisecond, measured with events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return 10_000_000 / start.elapsed_time(end)


#: The real-GPU prefetch measurement: 8 batches of 64 MB.
CUDA_BATCHES, CUDA_ELEMENTS = 8, 16_000_000
#: The consumer's kernel per batch, as a multiple of the longer of one batch's pinned copy and
#: its pinning on the host: above 1, so a host that pins a little slower than it did during the
#: calibration does not set the pace; not much above, so the copy stream of a prefetcher
#: without ``record_stream`` does not run far ahead of the consumer within 8 batches.
KERNEL_PER_BATCH = 1.2
#: The safety pass's kernel per batch, run before the consumer reads the batch, as a multiple of
#: the same copy-or-pinning time: the consumer falls further behind the copies with every batch,
#: as one with heavy work per batch (or sharing the GPU with other processes) does. Memory freed
#: without ``record_stream(consumer)`` goes back to the copy stream at once, and the copy of the
#: batch three on is written into it (by about 3 batch times) long before the consumer's read of
#: the freed batch runs (at 5, 10, 15... batch times): the values read are then wrong on any GPU,
#: instead of only when other work happens to slow the consumer down during the timed loops.
SLOW_CONSUMER_PER_BATCH = 5.0


def _read_batch(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The consumer's read of a batch on the GPU: the sum of its values (0-dim)."""
    return x.sum() + y.sum()


def measure_prefetch_cuda(prefetch_to_device, *, slow_consumer: bool = True) -> dict:
    """Time a prefetcher against a serial loop on the real GPU, in this process.

    Called by a probe for the student's prefetcher (in their process) and by the check for
    the reference (in the grading process), with the same procedure:

    1. **warm-up, untimed**: pin, copy and sum every batch once and run the prefetcher once,
       so the pinned (host) caching allocator, the CUDA context and the consumer's kernels
       are warm in both loops;
    2. **calibration**: the consumer's kernel (``torch.cuda._sleep``) lasts
       :data:`KERNEL_PER_BATCH` times the longer of a non-blocking copy of one batch from
       pinned memory and the host's pinning of one batch (``pin_memory()``, a host memcpy that
       every loop below pays per batch). Then the GPU, not the host, sets the pace of both
       loops: the serial loop takes about copy + kernel per batch, a prefetcher that overlaps
       copies with compute about the kernel alone (half the serial time when pinning is
       quicker than the copy; a 64 MB host memcpy can be slower than a PCIe Gen5 copy, and a
       kernel only as long as the copy would then leave both loops paced by the host's
       pinning, with a ratio near 1 whatever the prefetcher does);
    3. the **serial loop**: pin, copy non-blocking on the current stream, then compute;
    4. the prefetched loop, reading each batch before the kernel (a missing wait shows);
    5. with ``slow_consumer``, **safety**, untimed: the prefetched loop again with a kernel of
       :data:`SLOW_CONSUMER_PER_BATCH` batch times *before* each read, so the consumer falls
       behind the copies (memory freed without ``record_stream`` is overwritten before it is
       read).

    Args:
        prefetch_to_device: The prefetcher to measure.
        slow_consumer: Run step 5 (the check runs it for the student's prefetcher only).

    Returns:
        ``{"serial_ms", "prefetched_ms", "ratio", "sums", "expected_sums", "copy_ms",
        "pin_ms", "late_sums", "late_race"}``: ``late_sums`` are the values step 5 read (None
        without it); ``late_race`` the simulated GPU's report of memory reused while read
        (tests only; a real GPU reads the wrong values instead).
    """
    device = torch.device("cuda:0")
    batches = _batches(CUDA_BATCHES, CUDA_ELEMENTS)
    for x, y in batches:  # 1. warm the pinned allocator, the copy path and the consumer's
        # kernels (CUDA loads a kernel's code at its first launch), untimed
        _ = x.pin_memory().to(device, non_blocking=True).sum()
        _ = y.pin_memory().to(device, non_blocking=True).sum() + _
    torch.cuda.synchronize()
    for _ in prefetch_to_device(iter(batches[:2]), device):
        pass
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    pinned = batches[0][0].pin_memory()
    start.record()
    pinned.to(device, non_blocking=True)
    end.record()
    end.synchronize()
    copy_ms = start.elapsed_time(end)  # 2. one pinned copy ...
    pin_times = []
    for _ in range(3):  # ... and the host's pinning of one batch (cached pinned blocks)
        t0 = time.perf_counter()
        tuple(t.pin_memory() for t in batches[0])
        pin_times.append((time.perf_counter() - t0) * 1000)
    pin_ms = sorted(pin_times)[1]
    cycles = int(_sleep_cycles_per_ms() * KERNEL_PER_BATCH * max(copy_ms, pin_ms))

    def run(iterable) -> tuple[float, list[float]]:
        sums = []
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for x, y in iterable:
            sums.append(_read_batch(x, y))  # reads the batch first: a missing wait shows here
            torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1000, [float(s) for s in torch.stack(sums).cpu()]

    def serial_batches():
        for batch in batches:
            yield tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)

    serial_ms, expected = run(serial_batches())  # 3.
    prefetched_ms, sums = run(prefetch_to_device(iter(batches), device))  # 4.
    late_sums, late_race = None, None
    if slow_consumer:  # 5.
        slow = int(cycles * SLOW_CONSUMER_PER_BATCH / KERNEL_PER_BATCH)
        reads = []
        torch.cuda.synchronize()
        try:
            for x, y in prefetch_to_device(iter(batches), device):
                torch.cuda._sleep(slow)
                reads.append(_read_batch(x, y))
        except RaceError as err:  # the simulated GPU's allocator reports it (tests)
            late_race = str(err)
        else:
            late_sums = [float(s) for s in torch.stack(reads).cpu()] if reads else []
        torch.cuda.synchronize()
    return {
        "serial_ms": serial_ms,
        "prefetched_ms": prefetched_ms,
        "ratio": prefetched_ms / serial_ms,
        "sums": sums,
        "expected_sums": expected,
        "copy_ms": copy_ms,
        "pin_ms": pin_ms,
        "late_sums": late_sums,
        "late_race": late_race,
    }


def _probe_prefetch_cuda(prefetch_to_device) -> dict:
    """Probe: :func:`measure_prefetch_cuda` of the student's prefetcher."""
    return measure_prefetch_cuda(prefetch_to_device)


def check_prefetch_to_device_cuda(prefetch_to_device) -> None:
    """On a real GPU: the student's prefetched loop against a serial one (compute as long as a
    pinned copy), and against the reference measured the same way in the same grading run.

    Passes when the values are right and the student's ratio (prefetched / serial) is closer
    to the reference's than to 1.0 (no overlap), and at most :data:`MAX_PREFETCH_RATIO` or
    that midpoint, whichever is larger; and when a consumer that falls behind the copies
    (:data:`SLOW_CONSUMER_PER_BATCH`) still reads the right values (``record_stream``).
    """
    if not cuda_or_not_checked("prefetch_to_device overlapping real copies with real kernels"):
        return
    prefetch_to_device = student(prefetch_to_device, "prefetch_to_device")
    mine = call_student(
        prefetch_to_device.probe, _probe_prefetch_cuda, name="prefetch_to_device on this GPU"
    )
    theirs = measure_prefetch_cuda(reference(ASSIGNMENT).prefetch_to_device, slow_consumer=False)
    expected = torch.tensor(theirs["expected_sums"])

    def same(sums) -> bool:
        got = torch.tensor(sums if sums is not None else [])
        return got.shape == expected.shape and torch.allclose(got, expected, rtol=1e-4, atol=1e-2)

    safe = mine["late_race"] is None and same(mine["late_sums"])
    record_stream_cause = (
        "a batch's memory was handed to a later copy while the consumer still had to read it: the "
        "batch is allocated on the copy stream and used on the consumer's, so call "
        "t.record_stream(torch.cuda.current_stream()) on every tensor you yield (the caching "
        "allocator then waits for the consumer's work before reusing the memory)"
    )
    require(
        same(mine["sums"]),
        "values read from the prefetched batches",
        yours=mine["sums"][:3],
        expected=theirs["expected_sums"][:3],
        cause="the consumer read a batch before its copy finished: wait_stream before yielding"
        if safe
        else record_stream_cause,
    )
    limit = max(MAX_PREFETCH_RATIO, (1.0 + theirs["ratio"]) / 2)
    require(
        mine["ratio"] <= limit,
        "prefetched loop / serial loop on this GPU",
        yours=f"{mine['ratio']:.2f} ({mine['prefetched_ms']:.0f} vs {mine['serial_ms']:.0f} ms)",
        expected=f"at most {limit:.2f} (the reference: {theirs['ratio']:.2f} in this run)",
        cause="pin the batch, copy it non_blocking on a side stream, and issue the next copy before yielding",
    )
    require(
        safe,
        "values read by a consumer that falls behind the copies (a kernel of "
        f"{SLOW_CONSUMER_PER_BATCH:g} batch copies before each read) on this GPU",
        yours=mine["late_race"] or (mine["late_sums"] or [])[:3],
        expected=theirs["expected_sums"][:3],
        cause=record_stream_cause,
    )
    passed(
        f"prefetch_to_device overlaps on this GPU: {mine['ratio']:.2f}x the serial time "
        f"(reference {theirs['ratio']:.2f}x), and its batches stay intact while a slow consumer "
        "still reads them"
    )


# --------------------------------------------------------------------------- run_on_streams
def _full(k: int, device: str = "cpu") -> torch.Tensor:
    return torch.full((2,), float(k), device=device)


def _probe_streams_plain(run_on_streams, n: int, device: str = "cpu") -> dict:
    """Probe: run_on_streams on functions that make a small tensor on ``device``: the CPU
    without CUDA, ``"cuda"`` on a GPU machine (where a correct answer runs them on streams and
    calls ``record_stream`` on each result, which a CPU tensor does not support)."""
    results = run_on_streams([lambda k=k: _full(k, device) for k in range(n)])
    if not isinstance(results, list):
        return {"list": False, "type": type(results).__name__, "values": []}
    return {
        "list": True,
        "type": "list",
        "values": [r.tolist() if isinstance(r, torch.Tensor) else repr(r) for r in results],
    }


#: The simulated kernels of the functions run_on_streams gets, ms, after a 10 ms kernel that makes
#: their input. Not all alike: the last one is the shortest, so waiting for the last stream alone
#: (a loop variable used after the loop) lets the results be read while the others still run.
STREAM_KERNELS_MS = (50, 50, 50, 20)
#: The serial time of the simulated case: the input's kernel, then every function's in turn.
STREAMS_SERIAL_MS = 10 + sum(STREAM_KERNELS_MS)


def _probe_streams_simulated(run_on_streams) -> dict:
    """Probe: four kernels (:data:`STREAM_KERNELS_MS`) on the simulated GPU that read an input
    made on the current stream, then a kernel on the current stream that uses the results."""
    with simulated_cuda(allow_real_gpu=True) as sim:
        inputs = sim.produce(torch.ones(3), ready_at=sim.launch(10, label="make inputs"))

        def work(k):
            sim.launch(STREAM_KERNELS_MS[k], reads=[inputs], label=f"fn {k}")
            return sim.produce(torch.full((3,), float(k)))

        fns = [lambda k=k: work(k) for k in range(4)]
        t0 = time.perf_counter()
        try:
            results = run_on_streams(fns)
        except RaceError as err:
            return {"stage": "inputs", "race": str(err)}
        try:
            sim.launch(1, reads=results, label="use results")
        except RaceError as err:
            return {"stage": "results", "race": str(err)}
        sim.synchronize()
        elapsed_ms = (time.perf_counter() - t0) * 1000
        values = [float(r[0]) for r in results]
    return {"stage": None, "race": None, "values": values, "ms": elapsed_ms}


def _probe_streams_memory(run_on_streams) -> dict:
    """Probe: memory safety on the simulated GPU (virtual clock): the results are used by a long
    kernel on the current stream and dropped, then each side stream is used by someone else
    (PyTorch hands pooled streams out again). Without ``record_stream`` the allocator hands a
    result's memory to that new work while the long kernel still reads it."""
    with simulated_cuda(allow_real_gpu=True, virtual_time=True) as sim:

        def work(k):
            sim.launch(5, label=f"fn {k}")
            return sim.produce(torch.full((3,), float(k)))

        fns = [lambda k=k: work(k) for k in range(4)]
        results = run_on_streams(fns)
        sim.launch(30, reads=results, label="long use of results")
        streams = _allocation_streams(sim, results)
        del results, fns
        gc.collect()
        try:
            for stream_id in sorted(streams):
                if stream_id != sim.current.id:
                    with torch.cuda.stream(sim.streams[stream_id]):
                        sim.device_tensor(torch.empty(3))
        except RaceError as err:
            return {"race": str(err)}
    return {"race": None}


def check_run_on_streams(run_on_streams) -> None:
    """Check order and values (of CUDA tensors on a GPU machine), then concurrency and safety on
    the simulated GPU.

    Raises:
        CheckFailed: results out of order, work not concurrent, results returned before the
            current stream waits for them, or a result's memory reused while still read
            (no ``record_stream``).
    """
    run_on_streams = student(run_on_streams, "run_on_streams")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    plain = call_student(
        run_on_streams.probe, _probe_streams_plain, 3, device, name="run_on_streams(fns)"
    )
    require(
        plain["list"] and plain["values"] == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]],
        "run_on_streams must return the results in the order of fns",
        yours=plain["values"] if plain["list"] else plain["type"],
        expected="[tensor([0., 0.]), tensor([1., 1.]), tensor([2., 2.])]",
        cause="return [fn() results] in input order, as a list",
    )
    seen = call_student(
        run_on_streams.probe, _probe_streams_simulated, name="run_on_streams(fns) (simulated GPU)"
    )
    if seen["stage"] == "inputs":
        fail(
            "a function read its input before the current stream had produced it (simulated GPU)",
            yours=seen["race"],
            expected="each side stream waits for the current stream first",
            cause="call side_stream.wait_stream(torch.cuda.current_stream()) before running fn on it",
        )
    if seen["stage"] == "results":
        fail(
            "the results were used on the current stream before their streams had finished "
            f"(simulated GPU, kernels of {', '.join(map(str, STREAM_KERNELS_MS))} ms)",
            yours=seen["race"],
            expected="the current stream waits for every side stream before run_on_streams returns",
            cause="after launching, call torch.cuda.current_stream().wait_stream(s) for each side "
            "stream (all of them: a loop variable used after the loop is only the last one)",
        )
    require(
        seen["values"] == [0.0, 1.0, 2.0, 3.0],
        "results in the order of fns",
        yours=seen["values"],
        expected=[0.0, 1.0, 2.0, 3.0],
        cause="keep the results in input order",
    )
    ratio = seen["ms"] / STREAMS_SERIAL_MS
    require(
        ratio <= MAX_STREAMS_RATIO,
        f"four independent kernels ({', '.join(map(str, STREAM_KERNELS_MS))} ms) must run "
        "concurrently (simulated GPU)",
        yours=f"{seen['ms']:.0f} ms ({ratio:.2f}x the serial {STREAMS_SERIAL_MS} ms)",
        expected=f"at most {MAX_STREAMS_RATIO}x (reference: about 60 ms)",
        cause="run each function inside `with torch.cuda.stream(s):` with its own torch.cuda.Stream(); "
        "on the default stream they run one after another",
    )
    memory = call_student(
        run_on_streams.probe, _probe_streams_memory, name="run_on_streams(fns) (simulated GPU)"
    )
    if memory["race"]:
        fail(
            "a result's memory was handed to new work on its side stream while the current stream "
            "still read it (simulated caching allocator)",
            yours=memory["race"],
            expected="each result marked as used by the current stream",
            cause="each result was allocated on its side stream and is used on the current one: "
            "call result.record_stream(torch.cuda.current_stream()) before returning it",
        )
    passed(
        f"run_on_streams runs the functions concurrently and returns safe results "
        f"({seen['ms']:.0f} ms for kernels of {', '.join(map(str, STREAM_KERNELS_MS))} ms)"
    )


def _sleeper(k: int, cycles: int):
    def fn():
        out = torch.zeros(1, device="cuda")
        torch.cuda._sleep(cycles)
        return out.fill_(float(k))  # written after the sleep, on the same stream

    return fn


def measure_streams_cuda(run_on_streams) -> dict:
    """Four ~50 ms ``torch.cuda._sleep`` kernels through ``run_on_streams`` on the real GPU, in
    this process (the student's, through a probe; the reference's, in the check). Returns the
    elapsed ms (CUDA events on the current stream), the results read on the current stream,
    and ``kernel_ms``: one of those kernels alone, timed right after. A kernel spins for a
    number of clock cycles, so its length follows the GPU's clock, which may still be rising
    from idle during the calibration: the serial time is ``4 * kernel_ms``, measured, not the
    200 ms planned."""
    cycles = int(_sleep_cycles_per_ms() * 50)
    fns = [_sleeper(k, cycles) for k in range(4)]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    results = run_on_streams(fns)
    total = torch.cat(results).clone()  # read on the current stream
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return {"ms": ms, "values": total.tolist(), "kernel_ms": start.elapsed_time(end)}


def _probe_streams_cuda(run_on_streams) -> dict:
    """Probe: :func:`measure_streams_cuda` of the student's function."""
    return measure_streams_cuda(run_on_streams)


def check_run_on_streams_cuda(run_on_streams) -> None:
    """On a real GPU: four ~50 ms torch.cuda._sleep kernels, against the serial 200 ms and the
    reference measured in the same grading run."""
    if not cuda_or_not_checked("run_on_streams with real kernels on real streams"):
        return
    run_on_streams = student(run_on_streams, "run_on_streams")
    mine = call_student(
        run_on_streams.probe, _probe_streams_cuda, name="run_on_streams on this GPU"
    )
    require(
        mine["values"] == [0.0, 1.0, 2.0, 3.0],
        "results read on the current stream",
        yours=mine["values"],
        expected=[0.0, 1.0, 2.0, 3.0],
        cause="the current stream must wait for each side stream before the results are used",
    )
    theirs = measure_streams_cuda(reference(ASSIGNMENT).run_on_streams)
    ratio = mine["ms"] / (4 * mine["kernel_ms"])
    ratio_ref = theirs["ms"] / (4 * theirs["kernel_ms"])
    require(
        ratio <= max(MAX_STREAMS_RATIO, 1.5 * ratio_ref),
        "four ~50 ms kernels on this GPU, against the four run one after another",
        yours=f"{mine['ms']:.0f} ms, {ratio:.2f}x the serial {4 * mine['kernel_ms']:.0f} ms",
        expected=f"at most {max(MAX_STREAMS_RATIO, 1.5 * ratio_ref):.2f}x "
        f"(the reference: {ratio_ref:.2f}x in this run)",
        cause="give each function its own stream",
    )
    passed(
        f"run_on_streams: {mine['ms']:.0f} ms for four 50 ms kernels (reference {theirs['ms']:.0f} ms)"
    )
