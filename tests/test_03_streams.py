"""03_streams: the checks accept the reference and written-differently answers and reject
every listed mistake, on the simulated GPU (so the verdict is the same on any machine)."""

import inspect

import pytest
import torch

from grader.checks import ch03_streams as checks
from grader.checks.common import CheckFailed

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
    0.25): a host memcpy can be slower than the PCIe copy."""
    from contextlib import contextmanager
    from unittest import mock

    from grader.runtime.simulate import simulated_cuda

    monkeypatch.setattr(checks, "CUDA_ELEMENTS", 1_250_000)

    @contextmanager
    def gpu(pin: float):
        with (
            simulated_cuda(
                transfers=True, virtual_time=True, pin_gbps=pin, pageable_gbps=0.125
            ) as sim,
            mock.patch.object(torch.cuda, "_sleep", lambda cycles: sim.launch(cycles / 1e6)),
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
