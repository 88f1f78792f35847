"""03_streams: the checks accept the reference and written-differently answers and reject
every listed mistake, on the simulated GPU (so the verdict is the same on any machine)."""

import inspect

import pytest
import torch

from grader.checks import ch03_streams as checks
from grader.checks.common import CheckFailed
from grader.runtime.simulate import RaceError

from .helpers import (
    answer_fn,
    assert_sample_scores_as_declared,
    reference_fn,
    run_every_check,
    sample_params,
)

A = "03_streams"


@pytest.mark.parametrize(
    "name, signature",
    [
        (
            "prefetch_to_device",
            "(batches: collections.abc.Iterable[tuple], device) -> collections.abc.Iterator[tuple]",
        ),
        (
            "run_on_streams",
            "(fns: list[collections.abc.Callable[[], torch.Tensor]]) -> list[torch.Tensor]",
        ),
    ],
)
def test_reference_has_the_curriculum_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize("name", ["prefetch_to_device", "run_on_streams"])
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


def test_reference_prefetch_is_a_plain_generator_without_cuda():
    batches = [(torch.ones(2), torch.zeros(1)), (torch.full((2,), 2.0), torch.ones(1))]
    out = reference_fn(A, "prefetch_to_device")(iter(batches), "cpu")
    assert inspect.isgenerator(out)
    got = list(out)
    assert [torch.equal(a, b) for g, b_ in zip(got, batches) for a, b in zip(g, b_)] == [True] * 4
    assert list(reference_fn(A, "prefetch_to_device")(iter([]), "cpu")) == []


def test_missing_batch_is_reported_with_its_count():
    def drops_last(batches, device):
        batches = list(batches)
        for batch in batches[:-1]:
            yield tuple(t.to(device) for t in batch)

    with pytest.raises(CheckFailed, match="yield every batch once"):
        checks.check_prefetch_to_device(drops_last)


def test_run_on_streams_order_is_checked():
    with pytest.raises(CheckFailed, match="order of fns"):
        checks.check_run_on_streams(lambda fns: [fn() for fn in reversed(fns)])


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU on a CPU-only machine")
@pytest.mark.parametrize("name", ["reference", "correct_streams_events"])
def test_run_on_streams_check_passes_correct_answers_on_a_gpu_machine(name):
    """On a GPU machine a correct run_on_streams takes the CUDA path and calls record_stream on
    each result, which real CUDA supports only for CUDA tensors (a CPU tensor raises
    NotImplementedError: the operator has no CPU kernel). So the check's functions must make
    their tensors on the GPU there. Played with the simulated GPU (tensors made with
    device="cuda" live on it) and a record_stream that, like CUDA's, rejects other tensors."""
    from unittest import mock

    from grader.runtime.simulate import simulated_cuda

    fn = answer_fn(A, name, "run_on_streams")
    with simulated_cuda(transfers=True) as sim:
        played = torch.Tensor.record_stream

        def record_stream(self, stream):
            if self not in sim.on_device:
                raise NotImplementedError(
                    "Could not run 'aten::record_stream' with arguments from the 'CPU' backend"
                )
            return played(self, stream)

        with mock.patch.object(torch.Tensor, "record_stream", record_stream):
            checks.check_run_on_streams(fn)


def _prefetcher(name):
    return answer_fn(A, name, "prefetch_to_device")


@pytest.fixture
def gpu_with_slow_pinning(monkeypatch):
    """The CUDA check's measurement played on the simulated GPU (virtual clock), 5 MB batches:
    pinned copies of 20 ms, pageable ones twice as slow, ``torch.cuda._sleep`` a kernel of 1 ms
    per million cycles; ``pin`` sets the host's ``pin_memory()`` rate, GB/s (the copies' is
    0.25): a host memcpy can be slower than the PCIe copy. With ``reads`` the consumer's read of
    a batch is a 0.1 ms kernel that reads it, so the simulated allocator sees memory reused
    while read; ``slowdown`` stretches every consumer kernel after the calibration (another
    process sharing the GPU)."""
    from contextlib import contextmanager
    from unittest import mock

    from grader.runtime.simulate import simulated_cuda

    monkeypatch.setattr(checks, "CUDA_ELEMENTS", 1_250_000)

    @contextmanager
    def gpu(pin: float, *, reads: bool = False, slowdown: float = 1.0):
        sleeps = []

        def sleep(cycles):
            sleeps.append(cycles)  # the first two calibrate (_sleep_cycles_per_ms)
            sim.launch(cycles / 1e6 * (slowdown if len(sleeps) > 2 else 1.0))

        def read_batch(x, y):
            sim.launch(0.1, reads=(x, y), label="read")
            return x.sum() + y.sum()

        with (
            simulated_cuda(
                transfers=True, virtual_time=True, pin_gbps=pin, pageable_gbps=0.125
            ) as sim,
            mock.patch.object(torch.cuda, "_sleep", sleep),
            mock.patch.object(checks, "_read_batch", read_batch if reads else checks._read_batch),
        ):
            yield sim

    return gpu


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU on a CPU-only machine")
@pytest.mark.parametrize("pin", [0.125, 0.0625])  # pinning 2x and 4x as slow as the copy
def test_prefetch_cuda_measurement_shows_overlap_when_pinning_is_slower_than_the_copy(
    gpu_with_slow_pinning, pin
):
    """With the consumer's kernel only as long as the copy, a host that pins slower than PCIe
    copies paces both loops: the reference's ratio was 1.0, no better than no overlap."""
    with gpu_with_slow_pinning(pin):
        ref = checks.measure_prefetch_cuda(_prefetcher("reference"))
    with gpu_with_slow_pinning(pin):
        default_stream = checks.measure_prefetch_cuda(_prefetcher("wrong_prefetch_default_stream"))
    assert ref["ratio"] < 0.95
    assert default_stream["ratio"] > (1 + ref["ratio"]) / 2 + 0.05


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU on a CPU-only machine")
@pytest.mark.parametrize(
    "name, passes",
    [
        ("reference", True),
        ("correct_prefetch_events", True),
        ("wrong_prefetch_default_stream", False),
        ("wrong_prefetch_pageable", False),
    ],
)
def test_prefetch_cuda_check_with_pinning_4x_slower_than_the_copy(
    gpu_with_slow_pinning, name, passes
):
    with gpu_with_slow_pinning(0.0625):
        if passes:
            checks.check_prefetch_to_device_cuda(_prefetcher(name))
        else:
            with pytest.raises(CheckFailed, match="prefetched loop / serial loop"):
                checks.check_prefetch_to_device_cuda(_prefetcher(name))


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU on a CPU-only machine")
@pytest.mark.parametrize("name", ["reference", "wrong_prefetch_no_record_stream"])
def test_prefetch_cuda_timed_loop_shows_a_missing_record_stream_only_on_a_shared_gpu(
    gpu_with_slow_pinning, name
):
    """Why wrong_prefetch_record_on_copy_stream failed the CUDA cell on a GPU that 13 test
    processes shared, and wrong_prefetch_no_record_stream did not: in the timed loops the
    consumer keeps up with the copies, so a batch freed without record_stream(consumer) is
    read before the copy three batches on reuses its memory; once another process stretches
    the consumer's kernels by half after the calibration, the copy overwrites a batch that is
    still to be read (on a real GPU: wrong values)."""
    for slowdown, race in ((1.0, False), (1.5, name != "reference")):
        with gpu_with_slow_pinning(0.5, reads=True, slowdown=slowdown):
            if race:
                with pytest.raises(RaceError, match="reused by new work"):
                    checks.measure_prefetch_cuda(_prefetcher(name), slow_consumer=False)
            else:
                checks.measure_prefetch_cuda(_prefetcher(name), slow_consumer=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU on a CPU-only machine")
@pytest.mark.parametrize("pin", [0.5, 0.0625])  # pinning faster, and 4x slower, than the copy
@pytest.mark.parametrize(
    "name, passes",
    [
        ("reference", True),
        ("correct_prefetch_events", True),
        ("wrong_prefetch_synchronizes_host", True),  # safe; its mistake shows without CUDA
        ("wrong_prefetch_no_record_stream", False),
        ("wrong_prefetch_record_on_copy_stream", False),
    ],
)
def test_prefetch_cuda_check_reads_every_batch_behind_a_slow_consumer(
    gpu_with_slow_pinning, pin, name, passes
):
    """The CUDA check's safety pass (a kernel of SLOW_CONSUMER_PER_BATCH batch times before each
    read) rejects a prefetcher without record_stream(consumer) whatever else runs on the GPU;
    a correct one, which the allocator protects, passes."""
    with gpu_with_slow_pinning(pin, reads=True):
        if passes and name != "wrong_prefetch_synchronizes_host":
            checks.check_prefetch_to_device_cuda(_prefetcher(name))
        elif passes:
            seen = checks.measure_prefetch_cuda(_prefetcher(name))
            assert seen["late_race"] is None and seen["late_sums"] == seen["expected_sums"]
        else:
            with pytest.raises(CheckFailed, match="falls behind the copies") as err:
                checks.check_prefetch_to_device_cuda(_prefetcher(name))
            assert "record_stream(torch.cuda.current_stream())" in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU on a CPU-only machine")
@pytest.mark.parametrize(
    "name, passes",
    [
        ("reference", True),
        ("correct_streams_events", True),
        ("wrong_streams_default_stream", False),
    ],
)
def test_run_on_streams_cuda_check_when_the_clock_rises_after_calibration(name, passes):
    """torch.cuda._sleep spins for clock cycles: calibrated while the GPU's clock still rises
    from idle (here: at half speed), the 50 ms kernels then last 25 ms, and four of them one
    after another (100 ms) came in under the fixed 120 ms limit. Played on the simulated GPU."""
    from unittest import mock

    from grader.runtime.simulate import simulated_cuda

    fn = answer_fn(A, name, "run_on_streams")
    calls = []

    def sleep(cycles):  # the student's calibration (the first two kernels) at half the clock
        calls.append(cycles)
        sim.launch(cycles / (0.5e6 if len(calls) <= 2 else 1e6))

    with (
        simulated_cuda(transfers=True, virtual_time=True) as sim,
        mock.patch.object(torch.cuda, "_sleep", sleep),
    ):
        if passes:
            checks.check_run_on_streams_cuda(fn)
        else:
            with pytest.raises(CheckFailed, match="against the four run one after another"):
                checks.check_run_on_streams_cuda(fn)


def test_notebook_shows_the_students_prefetcher_on_the_simulated_gpu_and_what_it_stands_in_for():
    """The cell after Exercise 1 runs the student's prefetch_to_device on the simulated GPU, and
    the text before it gives the simulated link's real bandwidth constant."""
    from grader.runtime import course, simulate

    nb = course.read(course.source_path("03_streams"))
    cells = {c.get("id"): c.source for c in nb.cells}
    assert "prefetch_to_device(BATCHES" in cells["code-11c"]
    assert "simulated_timeline(your_prefetch_loop)" in cells["code-11c"]
    assert f"{simulate.SIM_H2D_GBPS} GB/s (`SIM_H2D_GBPS`" in cells["md-11b"]
    assert "What the simulated GPU stands in for" in cells["md-11b"]


def _backward_streams_cell() -> str:
    from grader.runtime import course

    cells = {c.get("id"): c.source for c in course.read(course.source_path(A)).cells}
    return cells["code-04c"]


def test_backward_streams_section_quotes_the_docs_rules():
    from grader.runtime import course

    cells = {c.get("id"): c.source for c in course.read(course.source_path(A)).cells}
    text = cells["md-04b"]
    assert "notes/cuda.html#bwd-cuda-stream-semantics" in text
    for pattern in ("UNSAFE", "wait_stream(s)", "initial_grad.record_stream(s)"):
        assert pattern in text, pattern
    assert "Needs a CUDA GPU: skipped" in _backward_streams_cell()


@pytest.mark.cuda
def test_backward_ops_run_on_their_forward_ops_streams():
    """What 03's cell shows on a GPU: each branch's backward runs on that branch's stream."""
    namespace = {"torch": torch, "HAS_CUDA": True}
    exec(compile(_backward_streams_cell(), "code-04c", "exec"), namespace)
    seen, streams = namespace["WhichStream"].seen, namespace["streams"]
    for branch, stream in streams.items():
        assert seen[f"{branch} forward"] == stream.stream_id
        assert seen[f"{branch} backward"] == stream.stream_id


def _raw_events(name: str) -> list[dict]:
    """A shipped real trace's complete events, read with json alone (not the course's reader)."""
    import gzip
    import json

    from grader.runtime import course

    with gzip.open(course.TRACES / f"{name}.json.gz", "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def test_real_trace_demo_tells_a_stream_wait_from_a_host_wait(capsys):
    """03's A100 trace cell: cudaStreamWaitEvent (a stream waits) counted apart from the host
    waits, each as the raw events have them."""
    import collections

    import matplotlib

    from grader.runtime import course

    matplotlib.use("Agg")
    cells = {c.get("id"): c.source for c in course.read(course.source_path(A)).cells}
    ns: dict = {}
    for cell_id in ("code-02", "code-04r"):
        exec(compile(cells[cell_id], cell_id, "exec"), ns)
    out = capsys.readouterr().out
    host_waits = {"cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize"}

    multi = _raw_events("a100_event_sync_multi_stream")
    [call] = [e for e in multi if e["name"] == "cudaStreamWaitEvent"]
    [record] = [e for e in multi if e["name"] == "Stream Wait Event"]
    assert record["args"]["correlation"] == call["args"]["correlation"]
    assert (record["args"]["stream"], record["args"]["wait_on_stream"]) == (24, 20)
    assert [e["name"] for e in multi if e["name"] in host_waits] == ["cudaDeviceSynchronize"]
    queries = {e["args"]["correlation"] for e in multi if e["name"] == "cudaEventQuery"}
    event_syncs = {e["args"]["correlation"] for e in multi if e["name"] == "Event Sync"}
    assert event_syncs == queries and len(queries) == 3  # records of polls, not waits
    kernels = [e for e in multi if e["cat"] == "kernel"]
    assert [k["args"]["stream"] for k in kernels] == [20, 28, 24]
    assert max(k["ts"] + k["dur"] for k in kernels[:2]) < record["ts"]  # nothing to hold back
    device, host = ns["waits"]["a100_event_sync_multi_stream"]
    assert len(device) == 1 and [e.name for e in host] == ["cudaDeviceSynchronize"]
    assert "stream 24 waits" in out

    simple = _raw_events("a100_simple_add")
    calls = [e for e in simple if e["name"] == "cudaStreamWaitEvent"]
    records = [e for e in simple if e["name"] == "Stream Wait Event"]
    assert (len(calls), len(records)) == (34, 20)
    assert {r["args"]["correlation"] for r in records} <= {c["args"]["correlation"] for c in calls}
    convs = [e for e in simple if e["name"] == "aten::cudnn_convolution"]
    assert all(any(o["ts"] <= c["ts"] <= o["ts"] + o["dur"] for o in convs) for c in calls)
    waits = collections.Counter(e["name"] for e in simple if e["name"] in host_waits)
    assert waits == {"cudaStreamSynchronize": 16, "cudaDeviceSynchronize": 5}
    device, host = ns["waits"]["a100_simple_add"]
    assert len(device) == 34 and len(host) == 21
    assert sum(e.dur for e in device) < sum(e.dur for e in host) / 10  # the host does not wait
    assert "34 cudaStreamWaitEvent" in out and "{'aten::cudnn_convolution': 34}" in out
