"""09_compilation: the checks accept the reference and written-differently answers and reject
every listed mistake: graph breaks seen by torch._dynamo.explain, exported programs loaded in a
fresh process, compile speed-ups compared with the reference in the same run."""

import inspect
import pickle

import pytest
import torch

from grader import ch09_compilation as checks

from .helpers import assert_sample_scores_as_declared, reference_fn, run_every_check, sample_params

A = "09_compilation"


@pytest.mark.parametrize(
    "name, signature",
    [
        ("branch_free", "(x: torch.Tensor) -> torch.Tensor"),
        ("export_model", "(model, example_inputs, path) -> None"),
        ("compile_speedup", "(fn, *args) -> float"),
    ],
)
def test_reference_has_the_curriculum_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize("name", ["branch_free", "export_model", "compile_speedup"])
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


def test_the_notebooks_function_really_breaks_the_graph():
    report = checks.explain(checks.normalize_scores, torch.randn(16) * 3)
    assert report.graph_break_count >= 1
    assert any("item" in str(r.reason) for r in report.break_reasons)


def test_a_skipped_function_is_not_one_graph():
    """torch._dynamo.disable would report no break, but also no graph: the check needs both."""
    skipped = torch._dynamo.disable(checks.normalize_scores)
    report = checks.explain(lambda x: skipped(x), torch.randn(16) * 3)
    assert report.graph_count != 1 or report.graph_break_count != 0


def test_the_export_models_class_cannot_be_found_by_name():
    model = checks.make_export_model("conv")
    with pytest.raises((AttributeError, pickle.PicklingError)):
        pickle.dumps(model)


def test_fresh_process_reports_a_file_that_is_not_a_program(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"w": torch.ones(2)}, path)
    with pytest.raises(RuntimeError) as info:
        checks.run_in_fresh_process(path, [(torch.ones(1),)])
    assert str(info.value).strip()


def test_fresh_process_runs_a_saved_program(tmp_path):
    model = checks.make_export_model("two_inputs").eval()
    example = checks.export_inputs("two_inputs", 4)
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, example), path)
    (out,) = checks.run_in_fresh_process(path, [example])
    with torch.no_grad():
        assert torch.allclose(out, model(*example), atol=1e-6)
