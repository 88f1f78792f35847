"""03_streams: the checks accept the reference and written-differently answers and reject
every listed mistake, on the simulated GPU (so the verdict is the same on any machine)."""

import inspect

import pytest
import torch

from grader import ch03_streams as checks
from grader.common import CheckFailed

from .helpers import assert_sample_scores_as_declared, reference_fn, run_every_check, sample_params

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
