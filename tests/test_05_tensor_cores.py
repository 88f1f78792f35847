"""05_tensor_cores: the checks accept the reference and written-differently answers and
reject every listed mistake (matmul_tflops on the simulated GPU's matmul model, with any
correct timer); CASE_FINDINGS gets partial credit per case, judged as under autograde."""

import inspect
import statistics
import time

import pytest
import torch
from torch import nn
from torch.utils import benchmark

from grader.checks import ch05_tensor_cores as checks
from grader.checks import common
from grader.checks.common import CheckFailed
from grader.grading import judge
from grader.runtime import course, remote
from grader.tools import samples

from .helpers import (
    answer_fn,
    assert_sample_scores_as_declared,
    reference_fn,
    run_every_check,
    sample_params,
)

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


def test_module_is_judged_in_the_grading_process():
    assert checks.JUDGED_IN_GRADER is True


@pytest.mark.parametrize("name", ["tensor_core_violations", "pad_linear", "matmul_tflops"])
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


def test_reference_case_findings_pass_and_use_known_problems():
    findings = reference_fn(A, "CASE_FINDINGS")
    checks.check_case_findings(findings)
    assert checks.check_case_findings_hidden(findings) is None
    assert set(findings) == set(checks.CASES)
    assert set().union(*findings.values()) <= set(checks.PROBLEMS)


def test_answer_key_has_no_activation_problem_and_the_data_bugs():
    """Issue 15: Tanh/GELU is not a Tensor Core problem; the source's data-loading bugs are in."""
    findings = reference_fn(A, "CASE_FINDINGS")
    assert "math_heavy_activation" not in set().union(*findings.values())
    assert "drop_last_discards_data" in findings["case1"]
    assert "model_called_on_loader" in findings["case2"]
    assert "feature_mismatch" in findings["case3"]
    code = checks.CASES
    assert (
        "123" in code["case1"]
        and "batch_size=64" in code["case1"]
        and "drop_last=True" in code["case1"]
    )
    assert "model(loader)" in code["case2"]
    assert "15" in code["case3"] and "Linear(128," in code["case3"]


def _is_case_sample(sample) -> bool:
    return "case_findings" in sample.cells


@pytest.mark.parametrize(
    "sample", [p for p in sample_params(A) if not _is_case_sample(p.values[0])]
)
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


def _judge_findings(code: str) -> judge.Verdict:
    """Judge the CASE_FINDINGS test cell (hidden part included) as autograde does, on the
    value ``code`` defines, through a local channel."""
    namespace: dict = {}
    exec(compile(code, "<sample>", "exec"), namespace)  # noqa: S102
    nb = course.read(course.source_path(A))
    test = next(t for t in course.test_cells(nb) if t.grade_id == "test_case_findings")

    class Here:
        def request(self, fn, target, args, kwargs):
            handle = remote.Handle(target.__name__, namespace[target.__name__])
            return remote.LOCAL.request(fn, handle, args, kwargs)

    return judge.judge_cell(test.source, Here(), points=2)


@pytest.mark.parametrize("sample", [p for p in sample_params(A) if _is_case_sample(p.values[0])])
def test_case_sample_scores_as_declared(sample):
    """CASE_FINDINGS gives partial credit (grader.checks.common.Partial), which the in-process grader
    cannot see: judge the cell as autograde does and compare its fraction."""
    verdict = _judge_findings(sample.cells["case_findings"])
    if sample.is_mistake:
        assert not verdict.passed and verdict.fraction < 1, sample.name
    else:
        assert verdict.passed and verdict.fraction == 1, verdict.outputs


@pytest.mark.parametrize(
    "name, fraction",
    [("wrong_cases_every_option", 0.0), ("wrong_cases_misses_layout", (1 + 2 / 3 + 3 / 4) / 3)],
)
def test_partial_credit_per_case(name, fraction):
    sample = next(s for s in samples.load_samples(A) if s.name == name)
    verdict = _judge_findings(sample.cells["case_findings"])
    assert verdict.fraction == pytest.approx(fraction)
    assert verdict.outputs[-1]["output_type"] == "execute_result"
    assert float(verdict.outputs[-1]["data"]["text/plain"]) == pytest.approx(2 * fraction, abs=1e-3)


def test_guessing_scores_nothing_and_wrong_picks_cost():
    truth = {"a", "b"}
    assert checks.case_score({"a", "b"}, truth) == 1
    assert checks.case_score({"a"}, truth) == 0.5
    assert checks.case_score({"a", "x"}, truth) == 0
    assert checks.case_score(set(checks.PROBLEMS), {"misaligned_features"}) == 0


def test_feedback_teaches_without_giving_the_key(capsys):
    findings = reference_fn(A, "CASE_FINDINGS")
    answer = {k: set(v) for k, v in findings.items()}
    answer["case2"] = (answer["case2"] - {"model_called_on_loader"}) | {"math_heavy_activation"}
    result = checks.check_case_findings_hidden(answer)
    assert isinstance(result, common.Partial) and result < 1
    out = capsys.readouterr().out
    assert "case2: 2 of 3 problems found" in out and "1 problem(s) you listed is not" in out
    assert "how the data reaches the model" in out
    assert "model_called_on_loader" not in out and "math_heavy_activation" not in out
    assert "case1" not in out.split("(partial credit per case)")[1].split("Tensor Cores need")[0]


def test_unsolved_case_findings_is_not_attempted():
    from grader.checks.common import NotAttempted

    with pytest.raises(NotAttempted):
        checks.check_case_findings({"case1": None, "case2": None, "case3": None})


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


def test_pad_linear_that_changes_the_old_layer_fails():
    pad = reference_fn(A, "pad_linear")

    def pads_and_scribbles(layer, multiple=8):
        new = pad(layer, multiple)
        with torch.no_grad():
            layer.weight.mul_(2)
        return new

    with pytest.raises(CheckFailed, match="must not change the old layer"):
        checks.check_pad_linear(pads_and_scribbles)


# --------------------------------------------------------------------------- timers on the simulated GPU
def _inputs(n, dtype):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.randn(n, n, device=device, dtype=dtype), torch.randn(
        n, n, device=device, dtype=dtype
    )


def tflops_adaptive(n, dtype):
    a, b = _inputs(n, dtype)
    return (
        2
        * n**3
        / benchmark.Timer("a @ b", globals={"a": a, "b": b}).adaptive_autorange().median
        / 1e12
    )


def tflops_timer_timeit(n, dtype):
    a, b = _inputs(n, dtype)
    timer = benchmark.Timer("a @ b", globals={"a": a, "b": b})
    timer.timeit(5)
    return 2 * n**3 / timer.timeit(50).median / 1e12


def tflops_events(n, dtype):
    a, b = _inputs(n, dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(7):
        if not torch.cuda.is_available():  # the statement's CPU path
            t0 = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t0)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * n**3 / statistics.median(times) / 1e12


def tflops_events_only(n, dtype):
    """CUDA events whatever the device: right on a GPU, but the statement asks for the CPU's
    figure on a machine without one."""
    a, b = _inputs(n, dtype)
    a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    a @ b
    end.record()
    end.synchronize()
    return 2 * n**3 / (start.elapsed_time(end) / 1e3) / 1e12


def tflops_no_sync_loop(n, dtype):
    a, b = _inputs(n, dtype)
    times = []
    for _ in range(7):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e12


@pytest.mark.parametrize("fn", [tflops_adaptive, tflops_timer_timeit, tflops_events])
def test_any_correct_timer_passes_on_the_simulated_gpu(fn, capsys):
    checks.check_matmul_tflops(fn)
    assert "OK:" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path's check")
def test_an_answer_without_a_cpu_path_fails_on_a_machine_without_a_gpu():
    with pytest.raises(CheckFailed, match="on this CPU"):
        checks.check_matmul_tflops(tflops_events_only)


def test_a_timer_that_never_synchronizes_fails():
    with pytest.raises(CheckFailed, match="synchronize"):
        checks.check_matmul_tflops(tflops_no_sync_loop)


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU on a CPU-only machine")
def test_matmul_tflops_cuda_check_takes_each_sides_best_round(monkeypatch):
    """The real-GPU check on the simulated GPU. The grading jobs beside this one run their ordinary
    cells (this notebook's sawtooth demo, training) on the same GPU outside the _cuda lock, which
    can halve one measurement: a correct answer slowed in its first round passes (each side's best
    of CUDA_ROUNDS rounds counts), an answer off by 2x in every round (n**3 flops) still fails."""
    from grader.runtime.simulate import simulated_cuda

    small = [(256, torch.bfloat16), (512, torch.bfloat16), (511, torch.bfloat16)]
    monkeypatch.setattr(checks, "CUDA_CASES", small)
    ref = reference_fn(A, "matmul_tflops")
    calls = []

    def slowed_first_round(n, dtype):
        calls.append(n)
        value = ref(n, dtype)
        return value / 2 if len(calls) <= len(small) else value

    with simulated_cuda(transfers=True, virtual_time=True):
        checks.check_matmul_tflops_cuda(slowed_first_round)
        assert len(calls) == len(small) * checks.CUDA_ROUNDS
        with pytest.raises(CheckFailed, match="reference on this GPU"):
            checks.check_matmul_tflops_cuda(lambda n, dtype: ref(n, dtype) / 2)


@pytest.mark.parametrize(
    "sample, cause",
    [
        ("wrong_tflops_event_ms_as_seconds", "returns milliseconds"),
        ("wrong_tflops_binary_tera", "not 2**40"),
        ("wrong_tflops_single_call_no_warmup", "warm up before timing"),
        ("wrong_tflops_gflops", "not GFLOP/s"),
        ("wrong_tflops_floor_division", "// rounds the TFLOP/s down"),
        ("wrong_tflops_b_default_dtype", "same dtype"),
        pytest.param(
            "wrong_tflops_cpu_total_time",
            "time each call alone",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path's check"),
        ),
    ],
)
def test_matmul_tflops_names_unit_and_warm_up_mistakes(sample, cause):
    with pytest.raises(CheckFailed) as err:
        checks.check_matmul_tflops(answer_fn(A, sample, "matmul_tflops"))
    assert cause in str(err.value)


def test_first_matmul_of_a_shape_costs_set_up_time_on_the_simulated_gpu():
    """A median of timed calls after a warm-up does not see the one-time cost; one cold call does."""
    from grader.runtime.simulate import simulated_cuda

    with simulated_cuda(transfers=True, virtual_time=True) as sim:
        checks._charge_first_matmuls(sim, checks.FIRST_MATMUL_MS)
        a = torch.randn(64, 64, device="cuda")
        t0 = time.perf_counter()
        a @ a
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        a @ a
        second = time.perf_counter() - t0
    assert first >= checks.FIRST_MATMUL_MS / 1000 > 100 * second


def test_a_case_that_trains_under_float16_autocast_uses_a_grad_scaler():
    # A float16 training loop without torch.amp.GradScaler loses small gradients to underflow (06):
    # a case that is not about that problem must train in bfloat16 or scale its loss.
    for name, code in checks.CASES.items():
        if "autocast" in code and "backward" in code:
            assert "bfloat16" in code or "GradScaler" in code, name


def test_note_on_the_seed_cases_checks_its_claims_on_the_cpu(capsys):
    """05's note beside the cases: the bugs of the seed's own cases, each shown by code-14c."""
    from grader.runtime import course

    cells = {c.get("id"): c.source for c in course.read(course.source_path(A)).cells}
    note = cells["md-14b"]
    for bug in ("no nonlinearity", "Output features different", "123 samples", "Missing commas"):
        assert bug in note, bug
    namespace = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional}
    exec(compile(cells["code-14c"], "code-14c", "exec"), namespace)
    out = capsys.readouterr().out
    assert "two Linear layers == one Linear layer: True" in out
    assert "8 logits for 10 classes: IndexError" in out
    assert "batches of [64, 59], 0 unseen" in out and "batches of [64], 59 unseen" in out
