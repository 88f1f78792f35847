"""Checks for 03_streams: prefetch_to_device, run_on_streams.

The CPU checks run the student's code on the simulated GPU of :mod:`grader.simulate`
(with ``allow_real_gpu=True``, so the verdict is the same on every machine): copies and
kernels take real milliseconds there, streams run concurrently, a copy overlaps only from
pinned memory with ``non_blocking=True`` on a side stream, and a kernel that reads a
tensor before its copy landed is caught. The ``_cuda`` checks time real kernels.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from .common import call_student, cuda_or_not_checked, fail, passed, require
from .course import reference
from .simulate import RaceError, simulated_cuda

ASSIGNMENT = "03_streams"

#: Overlap must bring the prefetched loop to at most this fraction of the serial one.
#: Reference figure: 0.60 on the simulated GPU (20 ms copies, 20 ms compute, 6 batches).
MAX_PREFETCH_RATIO = 0.8
#: Four 50 ms kernels on their own streams against 200 ms serial. Reference: ~0.26.
MAX_STREAMS_RATIO = 0.6


# --------------------------------------------------------------------------- prefetch_to_device
def _batches(n: int = 6, elements: int = 1_250_000) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(elements, generator=g), torch.arange(4) + 10 * i) for i in range(n)]


def _collect(prefetch_to_device, batches, device) -> list:
    out = call_student(prefetch_to_device, iter(batches), device)
    require(
        isinstance(out, Iterator),
        "prefetch_to_device must return an iterator (write it as a generator)",
        yours=type(out).__name__,
        expected="a generator",
        cause="use `yield` inside the function",
    )
    return list(out)


def _require_same_batches(got, batches, device_type: str) -> None:
    require(
        len(got) == len(batches),
        "prefetch_to_device must yield every batch once",
        yours=len(got),
        expected=len(batches),
        cause="yield one batch per input batch, including the last one",
    )
    for i, (g, b) in enumerate(zip(got, batches)):
        require(
            isinstance(g, tuple) and len(g) == len(b),
            f"batch {i} must be a tuple like the input",
            yours=type(g).__name__,
            expected=f"tuple of {len(b)} tensors",
            cause="yield tuple(tensor.to(device) for tensor in batch)",
        )
        for j, (t, ref) in enumerate(zip(g, b)):
            require(
                t.device.type == device_type,
                f"batch {i}[{j}] is on the wrong device",
                yours=str(t.device),
                expected=device_type,
                cause="move every tensor of the batch to `device`",
            )
            if device_type != "meta":
                require(
                    torch.equal(t.cpu(), ref),
                    f"batch {i}[{j}] has different values",
                    yours="different values",
                    expected="the input's values",
                    cause="yield the batches in input order, unchanged",
                )


def check_prefetch_to_device(prefetch_to_device) -> None:
    """Check values and order without CUDA, then overlap and safety on the simulated GPU.

    Raises:
        CheckFailed: wrong values or order, a read before the copy landed, or no overlap
            (pageable memory, the default stream, or blocking copies).
    """
    plain = _batches(3, 1000)
    _require_same_batches(_collect(prefetch_to_device, plain, "cpu"), plain, "cpu")
    _require_same_batches(_collect(prefetch_to_device, plain, torch.device("meta")), plain, "meta")

    batches = _batches()
    compute_ms = 20.0
    with simulated_cuda(transfers=True, allow_real_gpu=True) as sim:
        t0 = time.perf_counter()
        for batch in batches:  # the serial baseline: a blocking copy, then compute
            sim.launch(compute_ms, reads=tuple(t.to("cuda") for t in batch), label="compute")
        sim.synchronize()
        serial = time.perf_counter() - t0

        got, t0 = [], time.perf_counter()
        try:
            for batch in call_student(prefetch_to_device, iter(batches), torch.device("cuda:0")):
                sim.launch(compute_ms, reads=batch, label="compute")
                got.append(batch)
        except RaceError as err:
            fail(
                "a batch was used before its copy to the GPU had finished (simulated GPU)",
                yours=str(err),
                expected="the consumer's stream waits for the copy stream before the batch is yielded",
                cause="call torch.cuda.current_stream().wait_stream(copy_stream) (or wait on an event "
                "recorded after the copy) before yielding the batch",
            )
        sim.synchronize()
        prefetched = time.perf_counter() - t0
        transfers = [sim.on_device.get(t) for batch in got for t in batch]
    require(
        all(info is not None for info in transfers),
        "every yielded tensor must be on the device",
        yours=f"{sum(i is None for i in transfers)} tensor(s) not moved",
        expected="all moved with .to(device, non_blocking=True)",
        cause="move each tensor of the batch to `device`",
    )
    _require_same_batches([tuple(t.detach() for t in b) for b in got], batches, "cpu")
    ratio = prefetched / serial
    if ratio > MAX_PREFETCH_RATIO:
        if not all(i.pinned_source for i in transfers):
            cause = "the copies come from pageable memory, which cannot overlap with kernels: pin each tensor first (tensor.pin_memory())"
        elif not all(i.non_blocking for i in transfers):
            cause = "pass non_blocking=True, or the host waits for every copy"
        elif any(i.stream == 0 for i in transfers):
            cause = "the copies are issued on the default stream, behind the compute: issue them inside `with torch.cuda.stream(copy_stream):`"
        else:
            cause = "issue the copy of batch i+1 before yielding batch i, so it runs while batch i is used"
        fail(
            "prefetching must overlap the copy of the next batch with the compute on this one (simulated GPU)",
            yours=f"{1000 * prefetched:.0f} ms, {ratio:.2f}x the serial {1000 * serial:.0f} ms",
            expected=f"at most {MAX_PREFETCH_RATIO}x the serial time (reference: about 0.6x)",
            cause=cause,
        )
    passed(
        f"prefetch_to_device yields the right batches and overlaps copies with compute ({ratio:.2f}x serial on the simulated GPU)"
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


def check_prefetch_to_device_cuda(prefetch_to_device) -> None:
    """On a real GPU: pageable batches, a consumer as slow as the copies, at most 0.8x serial."""
    if not cuda_or_not_checked("prefetch_to_device overlapping real copies with real kernels"):
        return
    device = torch.device("cuda:0")
    batches = _batches(8, 16_000_000)  # 64 MB each
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    first = batches[0][0].to(device)
    torch.cuda.synchronize()
    copy_ms = (time.perf_counter() - t0) * 1000
    cycles = int(_sleep_cycles_per_ms() * copy_ms)
    del first

    def run(iterable):
        sums = []
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for x, y in iterable:
            sums.append(x.sum() + y.sum())  # reads the batch first: a missing wait shows here
            torch.cuda._sleep(cycles)
        torch.cuda.synchronize()
        return time.perf_counter() - t0, torch.stack(sums).cpu()

    serial, expected = run(tuple(t.to(device) for t in b) for b in batches)
    mine, got = run(call_student(prefetch_to_device, iter(batches), device))
    require(
        torch.allclose(got, expected),
        "values read from the prefetched batches",
        yours=got.tolist()[:3],
        expected=expected.tolist()[:3],
        cause="the consumer read a batch before its copy finished: wait_stream before yielding",
    )
    ratio = mine / serial
    require(
        ratio <= MAX_PREFETCH_RATIO,
        "prefetched loop / serial loop on this GPU",
        yours=f"{ratio:.2f} ({1000 * mine:.0f} vs {1000 * serial:.0f} ms)",
        expected=f"at most {MAX_PREFETCH_RATIO}",
        cause="pin the batch, copy it non_blocking on a side stream, and issue the next copy before yielding",
    )
    passed(f"prefetch_to_device overlaps on this GPU: {ratio:.2f}x the serial time")


# --------------------------------------------------------------------------- run_on_streams
def check_run_on_streams(run_on_streams) -> None:
    """Check order and values without CUDA, then concurrency and safety on the simulated GPU.

    Raises:
        CheckFailed: results out of order, work not concurrent, or results returned
            before the current stream waits for them.
    """
    plain = call_student(run_on_streams, [lambda k=k: torch.full((2,), float(k)) for k in range(3)])
    require(
        isinstance(plain, list) and [float(t[0]) for t in plain] == [0.0, 1.0, 2.0],
        "run_on_streams must return the results in the order of fns",
        yours=plain,
        expected="[tensor([0., 0.]), tensor([1., 1.]), tensor([2., 2.])]",
        cause="return [fn() results] in input order, as a list",
    )

    with simulated_cuda(allow_real_gpu=True) as sim:
        inputs = sim.produce(torch.ones(3), ready_at=sim.launch(10, label="make inputs"))

        def work(k):
            sim.launch(50, reads=[inputs], label=f"fn {k}")
            return sim.produce(torch.full((3,), float(k)))

        fns = [lambda k=k: work(k) for k in range(4)]
        t0 = time.perf_counter()
        try:
            results = call_student(run_on_streams, fns)
        except RaceError as err:
            fail(
                "a function read its input before the current stream had produced it (simulated GPU)",
                yours=str(err),
                expected="each side stream waits for the current stream first",
                cause="call side_stream.wait_stream(torch.cuda.current_stream()) before running fn on it",
            )
        try:
            sim.launch(1, reads=results, label="use results")
        except RaceError as err:
            fail(
                "the results were used on the current stream before their streams had finished (simulated GPU)",
                yours=str(err),
                expected="the current stream waits for every side stream before run_on_streams returns",
                cause="after launching, call torch.cuda.current_stream().wait_stream(s) for each side stream",
            )
        sim.synchronize()
        elapsed_ms = (time.perf_counter() - t0) * 1000
    require(
        [float(r[0]) for r in results] == [0.0, 1.0, 2.0, 3.0],
        "results in the order of fns",
        yours=[float(r[0]) for r in results],
        expected=[0.0, 1.0, 2.0, 3.0],
        cause="keep the results in input order",
    )
    ratio = elapsed_ms / 210.0
    require(
        ratio <= MAX_STREAMS_RATIO,
        "four independent 50 ms kernels must run concurrently (simulated GPU)",
        yours=f"{elapsed_ms:.0f} ms ({ratio:.2f}x the serial 210 ms)",
        expected=f"at most {MAX_STREAMS_RATIO}x (reference: about 60 ms)",
        cause="run each function inside `with torch.cuda.stream(s):` with its own torch.cuda.Stream(); "
        "on the default stream they run one after another",
    )
    passed(
        f"run_on_streams runs the functions concurrently and returns safe results ({elapsed_ms:.0f} ms for 4 x 50 ms)"
    )


def check_run_on_streams_cuda(run_on_streams) -> None:
    """On a real GPU: four ~50 ms torch.cuda._sleep kernels, against the reference and serial time."""
    if not cuda_or_not_checked("run_on_streams with real kernels on real streams"):
        return
    cycles = int(_sleep_cycles_per_ms() * 50)

    def make(k):
        def fn():
            out = torch.zeros(1, device="cuda")
            torch.cuda._sleep(cycles)
            return out.fill_(float(k))  # written after the sleep, on the same stream

        return fn

    fns = [make(k) for k in range(4)]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    results = call_student(run_on_streams, fns)
    total = torch.cat(results).clone()  # read on the current stream
    end.record()
    end.synchronize()
    mine = start.elapsed_time(end)
    require(
        total.tolist() == [0.0, 1.0, 2.0, 3.0],
        "results read on the current stream",
        yours=total.tolist(),
        expected=[0.0, 1.0, 2.0, 3.0],
        cause="the current stream must wait for each side stream before the results are used",
    )
    start.record()
    reference(ASSIGNMENT).run_on_streams(fns)
    end.record()
    end.synchronize()
    theirs = start.elapsed_time(end)
    require(
        mine <= max(MAX_STREAMS_RATIO * 200, 1.5 * theirs),
        "four ~50 ms kernels on this GPU",
        yours=f"{mine:.0f} ms",
        expected=f"well under the serial 200 ms (reference: {theirs:.0f} ms)",
        cause="give each function its own stream",
    )
    passed(f"run_on_streams: {mine:.0f} ms for four 50 ms kernels (reference {theirs:.0f} ms)")
