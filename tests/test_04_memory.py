"""04_memory: the checks accept the reference and written-differently answers and reject
every listed mistake (CUDA functions on the simulated allocator and link)."""

import inspect

import pytest
import torch
from torch import nn

from grader import ch04_memory as checks
from grader.common import CheckFailed

from .helpers import assert_sample_scores_as_declared, reference_fn, run_every_check, sample_params

A = "04_memory"


@pytest.mark.parametrize(
    "name, signature",
    [
        (
            "training_memory_bytes",
            "(model: torch.nn.modules.module.Module, optimizer: str = 'adam') -> dict[str, int]",
        ),
        ("peak_memory_bytes", "(fn) -> int"),
        ("train_without_leak", "(model, batches, loss_fn, optimizer) -> float"),
        ("h2d_bandwidth", "(nbytes: int, pinned: bool) -> float"),
    ],
)
def test_reference_has_the_curriculum_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize(
    "name", ["training_memory_bytes", "peak_memory_bytes", "train_without_leak", "h2d_bandwidth"]
)
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


def test_training_memory_bytes_by_hand():
    """Linear(10, 4) in fp32: 44 parameters = 176 bytes; Adam holds 176 + 176 + 352."""
    got = reference_fn(A, "training_memory_bytes")(nn.Linear(10, 4), "adam")
    assert got == {"parameters": 176, "gradients": 176, "optimizer_state": 352, "total": 704}


def test_peak_memory_bytes_needs_cuda_outside_the_simulation():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="CUDA"):
        reference_fn(A, "peak_memory_bytes")(lambda: None)


def test_leak_check_names_the_step():
    def leaky(model, batches, loss_fn, optimizer):
        kept = []
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            kept.append(loss)
        return float(sum(k.item() for k in kept) / len(kept))

    with pytest.raises(CheckFailed, match="graph of step 0 was still alive at step 2"):
        checks.check_train_without_leak(leaky)
