"""02_async: checks accept the reference and alternatives, reject every listed mistake;
the reference's cost model agrees with an event-by-event simulation of the queue."""

import inspect
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader import ch02_async as checks
from grader.common import CheckFailed

from .helpers import assert_sample_scores_as_declared, reference_fn, run_every_check, sample_params

A = "02_async"


@pytest.mark.parametrize(
    "name, signature",
    [
        ("time_gpu", "(fn, *args, warmup: int = 3, repeat: int = 10) -> float"),
        ("mean_loss_without_sync", "(model, batches, loss_fn) -> torch.Tensor"),
        ("pipeline_time", "(t1: float, t2: float, t3: float, n: int) -> tuple[float, float]"),
    ],
)
def test_reference_has_the_curriculum_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


def test_sync_points_answer_key_covers_every_snippet():
    key = reference_fn(A, "SYNC_POINTS")
    assert set(key) == set(checks.SYNC_SNIPPETS)
    assert all(isinstance(v, bool) for v in key.values())
    assert 0 < sum(key.values()) < len(key)


def test_cpu_recorder_agrees_with_the_answer_key():
    """The SyncRecorder sees, on the CPU, the same synchronizing calls the key lists."""
    assert checks.recorded_sync_points("cpu") == reference_fn(A, "SYNC_POINTS")


@pytest.mark.parametrize("name", ["time_gpu", "mean_loss_without_sync", "pipeline_time"])
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


def test_reference_sync_points_pass_every_check():
    run_every_check(checks, "sync_points", reference_fn(A, "SYNC_POINTS"))


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


def _simulate_queue(t1, t2, t3, n):
    """Event-by-event: op i is launched when the frontend is free, runs when the GPU is free."""
    frontend_free = gpu_free = 0.0
    for _ in range(n):
        launched = frontend_free + t1
        frontend_free = launched
        gpu_free = max(gpu_free, launched) + t2
    asynchronous = gpu_free + t3
    synchronous = 0.0
    for _ in range(n):
        synchronous += t1 + t2 + t3
    return synchronous, asynchronous


@given(
    t1=st.floats(0, 50),
    t2=st.floats(0, 50),
    t3=st.floats(0, 50),
    n=st.integers(1, 200),
)
def test_pipeline_time_matches_a_queue_simulation(t1, t2, t3, n):
    got = reference_fn(A, "pipeline_time")(t1, t2, t3, n)
    want = _simulate_queue(t1, t2, t3, n)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_pipeline_time_rejects_no_operations():
    with pytest.raises(ValueError):
        reference_fn(A, "pipeline_time")(1.0, 1.0, 1.0, 0)


def test_time_gpu_check_reports_seconds_as_a_units_mistake():
    def seconds(fn, *args, warmup=3, repeat=10):
        for _ in range(warmup):
            fn(*args)
        t0 = time.perf_counter()
        fn(*args)
        return time.perf_counter() - t0

    with pytest.raises(CheckFailed):
        checks.check_time_gpu(seconds)


def test_mean_loss_check_names_the_synchronizing_call():
    def item_each_batch(model, batches, loss_fn):
        total = 0.0
        for x, y in batches:
            total += loss_fn(model(x), y).item()
        return torch.tensor(total / len(batches))

    with pytest.raises(CheckFailed, match=r"\.item\(\) x5"):
        checks.check_mean_loss_without_sync(item_each_batch)


def test_sync_points_structure_check_rejects_missing_and_non_bool():
    with pytest.raises(CheckFailed, match="one entry per snippet"):
        checks.check_sync_points({"item": True})
    with pytest.raises(CheckFailed, match="True or False"):
        checks.check_sync_points(dict.fromkeys(checks.SYNC_SNIPPETS, 1))


def test_measured_sync_points_needs_cuda():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; see test_cuda.py")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        checks.measured_sync_points()
