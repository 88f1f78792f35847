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


def test_timeline_has_gpu_kernels():
    x = torch.randn(512, 512, device="cuda")
    spans = profile_spans(lambda: [x @ x for _ in range(5)])
    assert any(s.lane == LANE_GPU for s in spans)
