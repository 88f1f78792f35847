"""05_tensor_cores: the checks accept the reference and written-differently answers and
reject every listed mistake (matmul_tflops on the simulated GPU's matmul model)."""

import inspect

import pytest
import torch
from torch import nn

from grader import ch05_tensor_cores as checks
from grader.common import CheckFailed

from .helpers import assert_sample_scores_as_declared, reference_fn, run_every_check, sample_params

A = "05_tensor_cores"


@pytest.mark.parametrize(
    "name, signature",
    [
        (
            "tensor_core_violations",
            "(model: torch.nn.modules.module.Module, dtype: torch.dtype = torch.float16) -> list[str]",
        ),
        (
            "pad_linear",
            "(layer: torch.nn.modules.linear.Linear, multiple: int = 8) -> torch.nn.modules.linear.Linear",
        ),
        ("matmul_tflops", "(n: int, dtype: torch.dtype) -> float"),
    ],
)
def test_reference_has_the_curriculum_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize("name", ["tensor_core_violations", "pad_linear", "matmul_tflops"])
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


def test_reference_case_findings_pass_and_use_known_problems():
    findings = reference_fn(A, "CASE_FINDINGS")
    run_every_check(checks, "case_findings", findings)
    assert set(findings) == set(checks.CASES)
    assert set().union(*findings.values()) <= set(checks.PROBLEMS)


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


def test_case1_violations_by_hand():
    find = reference_fn(A, "tensor_core_violations")
    assert find(checks.Case1(), torch.float16) == ["encoder.0", "encoder.2", "head"]
    assert find(checks.Case1(), torch.float32) == ["head"]


def test_vocabulary_padding_keeps_logits():
    layer = nn.Linear(24, 50257)
    padded = reference_fn(A, "pad_linear")(layer, 64)
    assert padded.out_features == 50304
    x = torch.randn(3, 24)
    x_padded = torch.nn.functional.pad(x, (0, padded.in_features - 24))
    assert torch.allclose(padded(x_padded)[:, :50257], layer(x), atol=1e-5)
    assert torch.count_nonzero(padded(x_padded)[:, 50257:]) == 0


def test_torch_errors_are_not_mistaken_for_an_unsolved_exercise():
    def crashes(layer, multiple=8):
        raise NotImplementedError("Cannot copy out of meta tensor; no data!")

    with pytest.raises(CheckFailed, match="raised NotImplementedError: Cannot copy out of meta"):
        checks.check_pad_linear(crashes)
