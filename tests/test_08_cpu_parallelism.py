"""08_cpu_parallelism: the checks accept the reference and written-differently answers and
reject every listed mistake, judging behaviour (where and how many tasks ran, order, which
worker drew which number) rather than speed, except on a dataset that sleeps."""

import inspect
import os

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from grader.checks import ch08_cpu_parallelism as checks
from grader.checks.common import CheckFailed

from .helpers import (
    assert_sample_scores_as_declared,
    exercise_params,
    reference_fn,
    run_every_check,
    sample_params,
)

A = "08_cpu_parallelism"


@pytest.mark.parametrize(
    "name, signature",
    [
        ("parallel_map", "(fn, items, *, workers: int, backend: str = 'process') -> list"),
        ("seed_worker", "(worker_id: int) -> None"),
        ("loader_speedup", "(dataset, batch_size, workers) -> float"),
    ],
)
def test_reference_has_the_curriculum_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize(
    "name", exercise_params(A, ["parallel_map", "seed_worker", "loader_speedup"])
)
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


def test_without_worker_init_fn_every_worker_draws_the_same_numbers():
    """The trap the seed_worker exercise fixes is real: fork copies the dataset's Generator."""
    numbers = checks.noisy_numbers(None, loader_seed=0, workers=2)
    assert set(numbers) == {0, 1}
    assert numbers[0] == numbers[1]


def test_completion_order_is_named_as_the_cause():
    def in_completion_order(fn, items, *, workers, backend="process"):
        results = reference_fn(A, "parallel_map")(fn, items, workers=workers, backend=backend)
        return (
            sorted(results, key=lambda r: r[4])
            if results and isinstance(results[0], tuple)
            else results
        )

    with pytest.raises(CheckFailed, match="order of the items"):
        checks.check_parallel_map(in_completion_order)


def test_sleepy_dataset_logs_the_process_and_size_of_each_request(tmp_path):
    log = tmp_path / "pids.txt"
    ds = checks.SleepyDataset(n=5, ms=0, log=log)
    assert [int(ds[i]) for i in range(3)] == [0, 1, 2]
    assert [int(x) for x in torch.cat(list(DataLoader(ds, batch_size=2)))] == list(range(5))
    pid = str(os.getpid())
    assert log.read_text().splitlines() == [f"{pid} 1"] * 3 + [f"{pid} 2"] * 2 + [f"{pid} 1"]


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 20)), max_size=12))
def test_max_overlap_equals_brute_force(spans):
    intervals = [(float(s), float(s + d)) for s, d in spans]
    # at any moment: count intervals with start <= t < end (an end frees its slot first)
    moments = {s for s, _ in intervals}
    brute = max((sum(s <= t < e for s, e in intervals) for t in moments), default=0)
    assert checks.max_overlap(intervals) == brute


def test_the_checks_are_judged_in_the_grading_process():
    assert checks.JUDGED_IN_GRADER is True


def test_a_ratio_of_a_float_subclass_is_handed_over_as_a_float():
    import numpy as np
    import torch

    from grader.runtime import handover

    record = checks.number_attempt(lambda: np.float64(2.5))
    assert record == {"ok": True, "value": 2.5, "type": "numpy.float64"}
    assert type(record["value"]) is float
    handover.check_data(record)
    tensor = checks.number_attempt(lambda: torch.tensor(2.5))
    assert tensor["ok"] and tensor["value"] is None and tensor["type"] == "torch.Tensor"
    handover.check_data(tensor)


def test_a_tensor_ratio_fails_with_its_type():
    import time

    import torch
    from torch.utils.data import DataLoader

    def as_tensor(dataset, batch_size, workers):
        def seconds(n):
            start = time.perf_counter()
            for _ in DataLoader(dataset, batch_size, num_workers=n):
                pass
            return time.perf_counter() - start

        return torch.tensor(seconds(0) / seconds(workers))

    with pytest.raises(CheckFailed, match="must return a float(.|\n)*torch.Tensor"):
        checks.check_loader_speedup_hidden(as_tensor)


def test_a_worker_error_keeps_its_type_across_the_handover():
    """The exception re-raised by the student's parallel_map is judged by its class name, which
    travels with the rebuilt exception (the class itself stays in the student's process)."""
    seen = checks._probe_parallel_map(
        reference_fn(A, "parallel_map"), checks.fail_on_three, range(6), 2, "thread"
    )
    assert not seen["record"]["ok"]
    assert seen["record"]["error"]["types"][0] == "grader.checks.ch08_cpu_parallelism.WorkerError"
    assert seen["pid"] == os.getpid()
