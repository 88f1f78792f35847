"""Helpers shared by the chapter tests."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from grader.runtime import course
from grader.tools import samples


def sample_params(assignment: str):
    """pytest params: one per sample answer of an assignment, with its name as id."""
    import pytest

    return [pytest.param(s, id=s.name) for s in samples.load_samples(assignment)]


def assert_sample_scores_as_declared(sample: samples.Sample) -> None:
    """Grade the sample in-process (hidden tests included, grading mode) and compare
    the failing test cells with the ones it declares."""
    results = samples.run_test_cells(sample.assignment, sample.cells, only_for=set(sample.cells))
    assert results, f"no test cells ran for {sample.name}"
    gpu = torch.cuda.is_available()
    failing = {k for k, v in results.items() if v}
    expected = sample.expected_failures(gpu) & set(results)
    if not gpu:
        expected |= {k for k in results if k.endswith("_cuda")}
    allowed = expected | (sample.allowed_failures(gpu) & set(results))
    assert expected <= failing <= allowed, (
        f"{sample.assignment}/{sample.name}: failing {sorted(failing)}, declared {sorted(expected)}\n"
        + "\n".join(f"  {k}: {v}" for k, v in results.items() if v)
    )
    if sample.is_mistake:
        checkable = sample.expected_failures(gpu) - (
            {k for k in results if k.endswith("_cuda")} if not gpu else set()
        )
        assert checkable, (
            f"{sample.name} loses points only in CUDA cells, so this machine cannot prove it: "
            "give it a CPU-visible failure or mark the test cuda"
        )


def run_every_check(checks_module, name: str, value) -> None:
    """Run check_<name>, check_<name>_hidden and check_<name>_cuda (those that exist) on value."""
    for suffix in ("", "_hidden", "_cuda"):
        check = getattr(checks_module, f"check_{name}{suffix}", None)
        if check is not None:
            check(value)


def reference_fn(assignment: str, name: str):
    """A function or constant of the reference solution."""
    return getattr(course.reference(assignment), name)


def answer_fn(assignment: str, answer: str, name: str):
    """``name`` as the answer ``answer`` defines it: the reference solution's (``"reference"``)
    or a sample's (``wrong_...``/``correct_...``, from its cell ``name``)."""
    if answer == "reference":
        return reference_fn(assignment, name)
    (sample,) = [s for s in samples.load_samples(assignment) if s.name == answer]
    namespace: dict = {}
    exec(sample.cells[name], namespace)  # noqa: S102 - the course's own sample
    return namespace[name]


def wait_for(predicate: Callable[[], object], seconds: float, what: str, every: float = 0.5):
    """Poll ``predicate`` every ``every`` s until it returns something true (returned), or raise
    ``AssertionError`` naming ``what`` after ``seconds`` s."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds:.0f} s waiting for {what}")
