"""12_triton: the checks accept the reference and written-differently answers and reject every
listed mistake (missing mask, a grid that misses the last block, an unstable softmax, a row read
twice, wrong strides, a float16 accumulator, a materialized score matrix); the byte bounds the
checks use are computed here independently from the shapes and the reference's blocks."""

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

from grader.checks.ch12_triton import kernels as checks
from grader.checks.common import CheckFailed
from grader.runtime import triton_cpu

from .helpers import (
    answer_fn,
    assert_sample_scores_as_declared,
    exercise_params,
    reference_fn,
    run_every_check,
    sample_params,
)

A = "12_triton"
NAMES = ["bias_gelu", "softmax_rows", "matmul", "attention_forward"]
F32 = 4


@pytest.mark.parametrize(
    "name, signature",
    [
        ("bias_gelu", "(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor"),
        ("softmax_rows", "(x: torch.Tensor) -> torch.Tensor"),
        ("matmul", "(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor"),
        (
            "attention_forward",
            "(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor",
        ),
    ],
)
def test_reference_has_the_documented_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize("name", exercise_params(A, NAMES))
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


def _counted(fn, *args):
    with triton_cpu.count_traffic() as log:
        out = fn(*args)
    return out, log


def test_reference_bias_gelu_moves_the_bytes_computed_from_its_blocks():
    """x (37, 300): the reference's 16 x 128 tiles give cdiv(37, 16) = 3 row blocks, so the bias
    is read 3 times (3 * 300 * 4 bytes), inside the exercise's bounds."""
    m, n = 37, 300
    x, bias = checks.make_inputs("bias_gelu", (m, n, 0))
    out, log = _counted(reference_fn(A, "bias_gelu"), x, bias)
    total = log.total()
    per = total.per_tensor
    assert per["x_ptr"].loaded_bytes == m * n * F32
    assert per["bias_ptr"].loaded_bytes == math.ceil(m / 16) * n * F32
    assert per["out_ptr"].stored_bytes == per["out_ptr"].distinct_stored_bytes == m * n * F32
    assert total.loads_bytes == m * n * F32 + 3 * n * F32
    bounds = checks.bias_gelu_bounds(m, n)
    assert bounds == {"x": (44400, 44400), "bias": (1200, 44400), "out": (44400, 44400)}
    assert bounds["bias"][0] <= per["bias_ptr"].loaded_bytes <= bounds["bias"][1]
    torch.testing.assert_close(out, F.gelu(x + bias, approximate="tanh"))


def test_softmax_read_twice_is_twice_the_bytes():
    """The check's rule (loads == M*N*4) against the sample that reads rows twice: 2*M*N*4."""
    (x,) = checks.make_inputs("softmax_rows", (6, 100, 128, 0.0, 0))
    _, once = _counted(reference_fn(A, "softmax_rows"), x)
    twice_fn = answer_fn(A, "wrong_softmax_reads_rows_twice", "softmax_rows")
    _, twice = _counted(twice_fn, x)
    assert once.total().loads_bytes == 6 * 100 * F32
    assert twice.total().loads_bytes == 2 * 6 * 100 * F32


def test_attention_reads_k_and_v_once_per_program_and_stores_only_the_output():
    length, s, d = 48, 80, 16
    q, k, v = checks.make_inputs("attention_forward", (length, s, d, 0))
    out, log = _counted(reference_fn(A, "attention_forward"), q, k, v)
    total = log.total()
    programs = math.ceil(length / 32)  # the reference's BLOCK_M
    assert total.launches == [("attention_kernel", (programs, 1, 1))]
    assert total.per_tensor["k_ptr"].loaded_bytes == programs * s * d * F32
    assert total.per_tensor["v_ptr"].loaded_bytes == programs * s * d * F32
    assert total.per_tensor["q_ptr"].loaded_bytes == length * d * F32
    assert total.stores_bytes == length * d * F32
    assert checks.attention_bounds(length, s, d, programs)["k"] == programs * s * d * F32
    want = F.scaled_dot_product_attention(q[None], k[None], v[None])[0]
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)


def test_the_float16_case_separates_the_accumulators():
    """With K = 1024 the float32-accumulated float16 product is within the check's tolerance of
    the float64 product and the float16-accumulated one is not."""
    (spec,) = [c for c in checks.MATMUL_CASES if c[1] == 1024]
    assert spec[3] == "float16"
    a, b = checks.make_inputs("matmul", spec)
    want = a.double() @ b.double()
    rtol, atol = checks.MATMUL_TOL["float16"]
    good = (a.float() @ b.float()).half()
    assert torch.allclose(good.double(), want, rtol=rtol, atol=atol)
    bad_fn = answer_fn(A, "wrong_matmul_fp16_accumulator", "matmul")
    bad, _ = _counted(bad_fn, a, b)
    assert not torch.allclose(bad.double(), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    "sample, name, message",
    [
        ("wrong_bias_gelu_missing_mask", "bias_gelu", "a missing mask"),
        ("wrong_bias_gelu_grid_misses_last_block", "bias_gelu", "triton.cdiv"),
        ("wrong_bias_gelu_two_kernels", "bias_gelu", "one kernel"),
        ("wrong_softmax_unstable", "softmax_rows", "subtract the row's max"),
        ("wrong_softmax_reads_rows_twice", "softmax_rows", "each row read once"),
        ("wrong_softmax_masked_lanes_zero", "softmax_rows", "other=-float('inf')"),
        ("wrong_softmax_assumes_contiguous_rows", "softmax_rows", "x.stride(0)"),
        ("wrong_softmax_copies_x", "softmax_rows", "x.contiguous()"),
        ("wrong_matmul_fp16_accumulator", "matmul", "float16 accumulator"),
        ("wrong_matmul_assumes_contiguous_b", "matmul", "wrong strides"),
        ("wrong_matmul_not_autotuned", "matmul", "@triton.autotune"),
        ("wrong_attention_scores_with_torch", "attention_forward", "L x S score matrix"),
        ("wrong_attention_scratch_scores", "attention_forward", "materialized"),
        ("wrong_attention_two_pass", "attention_forward", "online softmax"),
        ("wrong_attention_no_key_mask", "attention_forward", "a missing mask"),
        ("wrong_bias_gelu_torch_after_kernel", "bias_gelu", "changed after the kernel"),
        ("wrong_softmax_numpy_after_kernel", "softmax_rows", "changed after the kernel"),
        ("wrong_attention_rows_with_torch_after_kernel", "attention_forward", "changed after"),
        ("wrong_attention_torch_rows_copied_by_kernel", "attention_forward", "other than q"),
        ("wrong_softmax_result_in_x", "softmax_rows", "changed its input"),
        ("wrong_softmax_subtracts_first_element", "softmax_rows", "subtract the row's max"),
        ("wrong_attention_two_pass_padded_grid", "attention_forward", "online softmax"),
        ("wrong_attention_assumes_contiguous_rows", "attention_forward", "stride(0)"),
        ("wrong_softmax_torch_result_read_back", "softmax_rows", "read the output"),
        ("wrong_attention_no_running_max", "attention_forward", "numerically unstable"),
        ("wrong_bias_gelu_tanh_from_exp", "bias_gelu", "(exp(2u) - 1) / (exp(2u) + 1)"),
        ("wrong_attention_running_max_from_zero", "attention_forward", "exp underflowed"),
        ("wrong_attention_k_stride_for_v", "attention_forward", "each its own row stride"),
        ("wrong_matmul_square_tiles_only", "matmul", "with your GPU config"),
        ("wrong_matmul_key_without_k", "matmul", "key leaves out K"),
        ("wrong_matmul_one_gpu_config", "matmul", "several configs for a GPU"),
        ("wrong_attention_scalar_running_state", "attention_forward", "Loop-carried variable"),
        ("wrong_matmul_gpu_block_k_8", "matmul", "the Triton compiler rejects"),
        ("wrong_matmul_tf32_float32", "matmul", "input_precision 'tf32x3' or 'ieee'"),
        ("wrong_attention_v_without_other", "attention_forward", "loaded without other="),
    ],
)
def test_each_mistake_is_named_in_the_message(sample, name, message):
    fn = answer_fn(A, sample, name)
    with pytest.raises(CheckFailed) as info:
        getattr(checks, f"check_{name}")(fn)
    text = str(info.value)
    assert message in text, text
    assert "Yours" in text and "Expected" in text and "Likely cause" in text


def test_autotuned_kernels_run_each_config_on_cpu_tensors_without_timing():
    """A kernel with two configs (it would fail to time them under the interpreter) runs under
    the probe's rule: config 0, then config 1, both counted; the log has one launch each."""
    import triton
    import triton.language as tl

    with triton_cpu.interpreter():

        @triton.autotune(
            configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 256})], key=["n"]
        )
        @triton.jit
        def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

    x = torch.randn(300)
    for index, programs in [(0, 5), (1, 2)]:
        out = torch.empty_like(x)
        seen = {"index": index}
        with checks._autotune_without_timing(seen), triton_cpu.count_traffic() as log:
            copy_kernel[lambda meta: (triton.cdiv(300, meta["BLOCK"]),)](x, out, 300)
        assert seen["configs"] == 2 and seen["autotuned"]
        assert log.total().launches == [("copy_kernel", (programs, 1, 1))]
        assert torch.equal(out, x)


def test_strided_inputs_keep_their_layout_on_another_device_copy():
    """_to_device keeps a column slice a slice and a transposed view a transposed view (checked
    with the CPU as the 'other' device: the same code path)."""
    (x,) = checks.make_inputs("softmax_rows", (3, 5, 8, 0.0, 0))
    assert x.stride() == (8, 1)
    a, b = checks.make_inputs("matmul", (4, 6, 5, "float32", "nt", 0))
    assert b.stride() == (1, 6)
    moved = checks._to_device(x, "cpu")
    assert moved.stride() == (8, 1) and torch.equal(moved, x)
    assert checks._to_device(b, "cpu").stride() == (1, 6)


def test_a_score_matrix_the_kernel_writes_into_a_buffer_made_outside_is_caught_by_its_stores():
    """The scratch-scores sample's kernel, with the (L, S) buffer allocated once outside the
    function (so no torch operation inside the call makes it): the stores give it away."""
    sample = answer_fn(A, "wrong_attention_scratch_scores", "attention_forward")
    kernel = sample.__globals__["attention_kernel"]
    scratch = torch.empty(128 * 128)

    def attention_forward(q, k, v):
        length, d = q.shape
        s = k.shape[0]
        out = torch.empty((length, d))
        kernel[(math.ceil(length / 16),)](
            q, k, v, scratch, out, length, s, 1.0 / math.sqrt(d), D=d, BLOCK_M=16, BLOCK_S=128
        )
        return out

    with pytest.raises(CheckFailed, match="the kernels stored") as info:
        checks.check_attention_forward(attention_forward)
    assert "other tensors: " in str(info.value)


def _result(**kw):
    """One compile result as :func:`grader.runtime.triton_compile.compile_launches` gives it."""
    base = {"kernel": "k", "arch": "sm_90", "ok": True, "stage": "compiled", "error": None,
            "registers": 40, "spills": 0, "shared_bytes": 0, "num_warps": 4, "num_stages": 3,
            "occupancy": {"warps_per_sm": 64}, "dots": [], "launch": 0, "pointers": ["*fp32"]}  # fmt: skip
    return {**base, **kw}


@pytest.mark.parametrize(
    "results, kwargs, message",
    [
        ([_result(ok=False, stage="compile", error="Loop-carried variable m")], {}, "rejects"),
        ([_result(ok=False, stage="launch", error="out of resource: shared memory")], {},
         "refuse to launch"),
        ([_result(ok=False, stage="launch", error="out of resource"),
          _result(ok=False, stage="launch", error="out of resource", launch=1)],
         {"every_variant": False}, "none of your GPU configs"),
        ([_result(dots=[{"a": "f32", "b": "f32", "out": "f32", "precision": "tf32"}])],
         {"float32_exact": True}, "input_precision"),
        ([_result(dots=[{"a": "f32", "b": "f32", "out": "f32", "precision": "bf16x3"}])],
         {"float32_exact": True}, "input_precision"),
    ],
)  # fmt: skip
def test_compile_results_that_fail(results, kwargs, message):
    with pytest.raises(CheckFailed, match=message):
        checks._judge_compiled("x", {"launches": len(results), "results": results}, **kwargs)


@pytest.mark.parametrize(
    "results, kwargs",
    [
        ([_result()], {}),
        # one GPU config too big for a GPU: the autotuner skips it there
        ([_result(ok=False, stage="launch", error="out of resource"), _result(launch=1)],
         {"every_variant": False}),
        # the course's limits, not the student's: not compiled here, reported
        ([_result(ok=False, stage="record", error="cannot re-create global f")], {}),
        ([_result(ok=False, stage="timeout", error="did not finish")], {}),
        # float16 dots need no precision; float32 ones with a float32-accurate one pass
        ([_result(dots=[{"a": "f16", "b": "f16", "out": "f32", "precision": "tf32"},
                        {"a": "f32", "b": "f32", "out": "f32", "precision": "tf32x3"},
                        {"a": "f32", "b": "f32", "out": "f32", "precision": "ieee"}])],
         {"float32_exact": True}),
    ],
)  # fmt: skip
def test_compile_results_that_pass(results, kwargs):
    facts = checks._judge_compiled("x", {"launches": 1, "results": results}, **kwargs)
    assert "compiled" in facts


def test_hidden_draws_cover_the_whole_domain():
    """The draws reach every layout of matmul, its largest K, float16 and float32, every d of
    attention with rows of different strides and all-negative scores, N of 4096 for softmax with
    strided rows and offsets of +-1e4, and sizes no power-of-two block divides."""
    mm = checks.draw_cases("matmul", 1, 200)
    assert {c[4][0] for c in mm} == {c[4][1] for c in mm} == set("ntsg")
    assert any(c[1] == checks.MATMUL_MAX_K for c in mm)
    assert {c[3] for c in mm} == {"float16", "float32"}
    assert any(c[0] % 16 and c[1] % 16 and c[2] % 16 for c in mm)
    at = checks.draw_cases("attention_forward", 1, 200)
    assert {c[2] for c in at} == {16, 32, 64, 128}
    assert any(c[6] for c in at) and any(len(set(c[4])) == 3 for c in at)
    sm = checks.draw_cases("softmax_rows", 1, 200)
    assert any(c[1] == 4096 for c in sm) and any(c[2] > c[1] for c in sm)
    assert {1e4, -1e4} <= {c[3] for c in sm}
    bg = checks.draw_cases("bias_gelu", 1, 200)
    assert any(c[3] >= 30 for c in bg) and any(c[0] == 0 for c in bg)
    # the draws used by the hidden checks are among these (the same seed)
    assert checks.draw_cases("matmul", 1, checks.MATMUL_DRAWS) == mm[: checks.MATMUL_DRAWS]
    for spec in mm[:30]:  # each layout as make_inputs documents it
        m, k, n = spec[:3]
        for t, how, cols in zip(checks.make_inputs("matmul", spec), spec[4], (k, n)):
            rows = t.shape[0]
            want = {"n": (cols, 1), "t": (1, rows), "s": (cols + 5, 1), "g": (2 * cols, 2)}[how]
            if rows > 1 and cols > 1:
                assert t.stride() == want, (spec, how, t.stride())


def test_very_negative_scores_are_all_below_where_exp_underflows():
    q, k, _ = checks.make_inputs("attention_forward", (30, 50, 64, 3, 0, 1.0, True))
    scores = (q.double() @ k.double().T) / math.sqrt(64)
    assert scores.max() < -104


def test_dots_reads_the_precision_of_each_tt_dot():
    from grader.runtime.triton_compile import dots

    ttir = (
        "%1 = tt.dot %a, %b, %c, inputPrecision = tf32 : tensor<32x16xf32> * "
        "tensor<16x32xf32> -> tensor<32x32xf32> loc(#loc1)\n"
        "%2 = tt.dot %a, %b, %c : tensor<32x16xf16> * tensor<16x32xf16> -> tensor<32x32xf32>"
    )
    assert dots(ttir) == [
        {"a": "f32", "b": "f32", "out": "f32", "precision": "tf32"},
        {"a": "f16", "b": "f16", "out": "f32", "precision": "ieee"},
    ]
