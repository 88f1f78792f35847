"""Checks that need a CUDA GPU (skipped with a reason elsewhere): the CUDA-only checks
accept the reference and reject the mistakes on real hardware, and the measured sync
points agree with the answer key."""

import pytest
import torch

from grader.checks import ch02_async
from grader.runtime import course
from grader.runtime.timeline import LANE_GPU, profile_spans
from grader.tools import samples

from .helpers import assert_sample_scores_as_declared
from .sync_cases import NO_SYNCS, SYNCS, sync_inputs

pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("aid", course.assignments())
def test_reference_passes_every_cell_on_the_gpu(aid):
    results = samples.run_test_cells(aid, None)
    assert {k: v for k, v in results.items() if v} == {}


@pytest.mark.parametrize(
    "sample",
    [
        pytest.param(s, id=f"{aid}/{s.name}")
        for aid in course.assignments()
        for s in samples.load_samples(aid)
    ],
)
def test_sample_scores_as_declared_on_the_gpu(sample):
    assert_sample_scores_as_declared(sample)


def test_measured_sync_points_match_the_answer_key():
    assert ch02_async.measured_sync_points() == course.reference("02_async").SYNC_POINTS


def _waits_on_the_gpu(case) -> bool:
    """Whether the case makes CUDA report a synchronizing call (set_sync_debug_mode("error"))."""
    inputs = sync_inputs("cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        case(**inputs)
    except RuntimeError as exc:
        if "synchroniz" not in str(exc):
            raise
        return True
    finally:
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
    return False


@pytest.mark.parametrize("name", list(SYNCS))
def test_the_cases_the_simulated_gpu_counts_as_syncs_synchronize_on_cuda(name):
    assert _waits_on_the_gpu(SYNCS[name])


@pytest.mark.parametrize("name", list(NO_SYNCS))
def test_the_cases_the_simulated_gpu_counts_as_no_sync_do_not_synchronize_on_cuda(name):
    assert not _waits_on_the_gpu(NO_SYNCS[name])


def test_timeline_has_gpu_kernels():
    x = torch.randn(512, 512, device="cuda")
    spans = profile_spans(lambda: [x @ x for _ in range(5)])
    assert any(s.lane == LANE_GPU for s in spans)
