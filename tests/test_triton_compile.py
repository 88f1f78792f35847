"""Triton kernels compiled for sm_90 and sm_80 without a GPU: ``grader.runtime.triton_compile``.

The kernels are 12_triton's reference kernels (``solutions/12_triton/12_triton.ipynb``), copied
small: a masked elementwise kernel, a softmax with ``tl.max``/``tl.sum``, an autotuned float16
matmul tile loop with a float32 accumulator, an online-softmax attention kernel; and kernels the
interpreter runs but the compiler rejects. They are decorated inside
``triton_cpu.interpreter()``, run on CPU tensors inside ``count_traffic()`` while
``record_launches()`` records them, and compiled in one fresh process (the ``compiled`` fixture:
6 to 10 s on a busy 2-core machine with an empty cache). The whole file takes about 25 s there.
"""

from __future__ import annotations

import contextlib
import json
import math
import os

import pytest
import torch

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from triton.language.extra import libdevice  # noqa: E402

from grader.runtime import triton_compile as tcc  # noqa: E402
from grader.runtime import triton_cpu as tc  # noqa: E402

pytestmark = pytest.mark.timeout(180)

#: Globals as a notebook cell might define them: a constexpr (kernels may read it), a plain int
#: (the interpreter reads it, the compiler refuses), a tensor (cannot be re-created at all).
LOG2E = tl.constexpr(1.4426950408889634)
PLAIN_SCALE = 2
WEIGHTS = torch.ones(4)


with tc.interpreter():

    @triton.jit
    def bias_gelu_kernel(
        x_ptr, bias_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
    ):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        mask = (rows[:, None] < M) & col_ok[None, :]
        offsets = rows[:, None] * N + cols[None, :]
        h = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + cols, mask=col_ok)[None, :]
        y = h * tl.sigmoid(2.0 * 0.7978845608028654 * (h + 0.044715 * h * h * h))
        tl.store(out_ptr + offsets, y, mask=mask)

    @triton.jit
    def softmax_kernel(x_ptr, out_ptr, N, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))
        z = x - tl.max(x, axis=0)
        e = tl.exp(z)
        tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)

    @triton.jit
    def matmul_tile(
        a_ptr,
        b_ptr,
        c_ptr,
        M,
        N,
        K,
        stride_am,
        stride_ak,
        stride_bk,
        stride_bn,
        stride_cm,
        stride_cn,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32 accumulator for fp16
        for k in range(0, K, BLOCK_K):
            ks = k + rk
            a = tl.load(
                a_ptr + rm[:, None] * stride_am + ks[None, :] * stride_ak,
                mask=(rm[:, None] < M) & (ks[None, :] < K),
                other=0.0,
            )
            b = tl.load(
                b_ptr + ks[:, None] * stride_bk + rn[None, :] * stride_bn,
                mask=(ks[:, None] < K) & (rn[None, :] < N),
                other=0.0,
            )
            acc = tl.dot(a, b, acc)
        c = acc.to(c_ptr.dtype.element_ty)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c, mask=mask)

    matmul_autotuned = triton.autotune(
        configs=[
            triton.Config(
                {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, num_warps=8, num_stages=3
            )
        ],
        key=["M", "N", "K"],
    )(matmul_tile)

    @triton.jit
    def attention_kernel(
        q_ptr,
        k_ptr,
        v_ptr,
        o_ptr,
        L,
        S,
        stride_q,
        stride_k,
        stride_v,
        stride_o,
        scale,
        D: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        dims = tl.arange(0, D)
        row_ok = rows < L
        q = tl.load(
            q_ptr + rows[:, None] * stride_q + dims[None, :], mask=row_ok[:, None], other=0.0
        )
        m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)
        l_i = tl.zeros((BLOCK_M,), tl.float32)
        acc = tl.zeros((BLOCK_M, D), tl.float32)
        for start in range(0, S, BLOCK_N):
            cols = start + tl.arange(0, BLOCK_N)
            col_ok = cols < S
            k = tl.load(
                k_ptr + cols[:, None] * stride_k + dims[None, :], mask=col_ok[:, None], other=0.0
            )
            s = tl.dot(q, tl.trans(k)) * scale
            s = tl.where(col_ok[None, :], s, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(
                v_ptr + cols[:, None] * stride_v + dims[None, :], mask=col_ok[:, None], other=0.0
            )
            acc = acc * alpha[:, None] + tl.dot(p, v)
            m_i = m_new
        tl.store(
            o_ptr + rows[:, None] * stride_o + dims[None, :],
            acc / l_i[:, None],
            mask=row_ok[:, None],
        )

    @triton.jit
    def running_sum_becomes_block(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        acc = 0.0  # a scalar...
        for start in range(0, n, BLOCK):
            offsets = start + tl.arange(0, BLOCK)
            acc = acc + tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)  # ...now a block
        tl.store(out_ptr + tl.arange(0, BLOCK), acc)

    @triton.jit
    def running_max_becomes_block(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        m = -float("inf")
        for start in range(0, n, BLOCK):
            offsets = start + tl.arange(0, BLOCK)
            m = tl.maximum(m, tl.load(x_ptr + offsets, mask=offsets < n, other=-float("inf")))
        tl.store(out_ptr, tl.max(m, axis=0))

    @triton.jit
    def row_sum(x):
        total = 0.0
        for _ in range(0, 2):
            total = total + x  # the same mistake, one call down
        return total

    @triton.jit
    def calls_a_rejected_helper(x_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, row_sum(tl.load(x_ptr + offsets)))

    @triton.jit
    def reads_a_plain_global(x_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets) * PLAIN_SCALE)

    @triton.jit
    def scaled(x, factor: tl.constexpr):
        return x * factor * LOG2E

    @triton.jit
    def tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, libdevice.tanh(scaled(x, 0.5)) + math.pi, mask=mask)

    @triton.jit
    def reads_a_tensor_global(x_ptr, BLOCK: tl.constexpr):
        tl.store(x_ptr + tl.arange(0, BLOCK), tl.load(x_ptr + tl.arange(0, BLOCK)) * WEIGHTS)

    @triton.jit
    def arguments_kernel(
        t32, t16, tbf, ti64, small, big, f, flag, nothing, one, BLOCK: tl.constexpr
    ):
        tl.store(t32 + tl.arange(0, BLOCK), tl.load(t32 + tl.arange(0, BLOCK)))


def _run_reference_kernels() -> list[dict]:
    """Run the reference kernels under the interpreter, inside count_traffic, while recording.
    Each is checked against torch, so a kernel that is wrong on the CPU cannot pass here."""
    torch.manual_seed(0)
    with tcc.record_launches() as launches, tc.count_traffic() as log:
        x, bias = torch.randn(40, 300), torch.randn(300)
        out = torch.empty_like(x)
        bias_gelu_kernel[(3, 3)](x, bias, out, 40, 300, BLOCK_M=16, BLOCK_N=128)
        torch.testing.assert_close(out, torch.nn.functional.gelu(x + bias, approximate="tanh"))
        out = torch.empty_like(x)
        for _ in range(2):  # the same variant twice: recorded once
            softmax_kernel[(40,)](x, out, 300, x.stride(0), out.stride(0), BLOCK=512)
        torch.testing.assert_close(out, torch.softmax(x, dim=1))
        a, b = torch.randn(128, 128).half(), torch.randn(128, 128).half()
        c = torch.empty(128, 128, dtype=torch.float16)
        grid = lambda meta: (triton.cdiv(128, meta["BLOCK_M"]), triton.cdiv(128, meta["BLOCK_N"]))  # noqa: E731
        matmul_autotuned[grid](a, b, c, 128, 128, 128, *a.stride(), *b.stride(), *c.stride())
        torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)
        q, k, v = (torch.randn(64, 32) for _ in range(3))
        o = torch.empty_like(q)
        attention_kernel[(2,)](
            q, k, v, o, 64, 64, 32, 32, 32, 32, 1 / math.sqrt(32), D=32, BLOCK_M=32, BLOCK_N=32
        )
        torch.testing.assert_close(
            o, torch.nn.functional.scaled_dot_product_attention(q, k, v), rtol=1e-4, atol=1e-4
        )
        xs = torch.randn(1000)
        sums = torch.empty(128)
        running_sum_becomes_block[(1,)](xs, sums, 1000, BLOCK=128)  # the interpreter runs it
        torch.testing.assert_close(sums.sum(), xs.sum(), rtol=1e-4, atol=1e-4)
        biggest = torch.empty(1)
        running_max_becomes_block[(1,)](xs, biggest, 1000, BLOCK=128)
        assert biggest.item() == xs.max().item()
        ys = torch.randn(64)
        twice = ys.clone()
        calls_a_rejected_helper[(1,)](twice, BLOCK=64)
        torch.testing.assert_close(twice, 2 * ys)
        twice = ys.clone()
        reads_a_plain_global[(1,)](twice, BLOCK=64)
        torch.testing.assert_close(twice, 2 * ys)
        # triton.language.extra.libdevice's functions are stubs the compiler replaces with
        # CUDA's libdevice; the course's interpreter support runs them (triton_cpu), and the
        # launch is compiled like any other
        t = torch.randn(1000)
        out = torch.empty_like(t)
        tanh_kernel[(8,)](t, out, 1000, BLOCK=128)
        torch.testing.assert_close(
            out, torch.tanh(t * 0.5 * 1.4426950408889634) + math.pi, rtol=1e-6, atol=1e-6
        )
    assert len(log) == 10  # count_traffic saw every launch
    assert all(launch.in_bounds for launch in log)
    return launches


@pytest.fixture(scope="module")
def recorded() -> list[dict]:
    return _run_reference_kernels()


@pytest.fixture(scope="module")
def compiled(recorded, tmp_path_factory) -> dict[tuple[str, str], dict]:
    """Every recorded launch compiled for sm_90 and sm_80 in one process, with an empty cache:
    ``(kernel, arch) -> result``."""
    cache = tmp_path_factory.mktemp("triton-cache")
    results = tcc.compile_launches(recorded, archs=(90, 80), cache_dir=cache)
    assert len(results) == 2 * len(recorded)
    assert json.loads(json.dumps(results)) == results  # plain data, for the grading process
    return {(r["kernel"], r["arch"]): r for r in results}


def test_each_variant_is_recorded_once_as_plain_data(recorded):
    """One record per distinct launch (softmax ran twice), json-able, with Triton's signature."""
    names = [r["kernel"] for r in recorded]
    assert names == [
        "bias_gelu_kernel",
        "softmax_kernel",
        "matmul_tile",
        "attention_kernel",
        "running_sum_becomes_block",
        "running_max_becomes_block",
        "calls_a_rejected_helper",
        "reads_a_plain_global",
        "tanh_kernel",
    ]
    assert json.loads(json.dumps(recorded)) == recorded
    softmax = recorded[1]
    assert softmax["signature"] == {
        "x_ptr": "*fp32",
        "out_ptr": "*fp32",
        "N": "i32",
        "x_row_stride": "i32",
        "out_row_stride": "i32",
        "BLOCK": "constexpr",
    }
    assert softmax["constexprs"] == {"BLOCK": 512}
    assert (softmax["num_warps"], softmax["num_stages"], softmax["problems"]) == (None, None, [])
    assert "x_ptr" in softmax["divisible_by_16"] and "N" not in softmax["divisible_by_16"]
    assert softmax["source"].startswith("import triton\nimport triton.language as tl\n")
    assert "@triton.jit\ndef softmax_kernel(" in softmax["source"]


def test_autotune_config_reaches_the_record(recorded):
    """The autotuner's config: its block sizes are constexprs, its num_warps/num_stages the
    record's; a stride of 1 is specialized to a constexpr, as Triton does on a GPU."""
    matmul = recorded[2]
    assert matmul["signature"]["a_ptr"] == "*fp16" and matmul["signature"]["M"] == "i32"
    assert matmul["constexprs"] == {
        "stride_ak": 1,
        "stride_bn": 1,
        "stride_cn": 1,
        "BLOCK_M": 128,
        "BLOCK_N": 128,
        "BLOCK_K": 64,
    }
    assert (matmul["num_warps"], matmul["num_stages"]) == (8, 3)
    assert "@triton.autotune" not in matmul["source"]


def test_reference_kernels_compile_for_both_architectures(compiled):
    """Every reference kernel compiles for sm_90 and sm_80 with registers and occupancy."""
    for name in (
        "bias_gelu_kernel",
        "softmax_kernel",
        "matmul_tile",
        "attention_kernel",
        "tanh_kernel",
    ):
        for arch in ("sm_90", "sm_80"):
            r = compiled[(name, arch)]
            assert r["ok"], (name, arch, r["error"])
            assert r["stage"] == "compiled" and r["error"] is None
            assert 0 < r["registers"] <= 255 and r["spills"] == 0
            assert r["occupancy"]["blocks_per_sm"] >= 1 and r["occupancy"]["arch"] == arch
            assert r["ttgir_excerpt"].startswith("#") and ".reg" in r["ptx_excerpt"]
            assert len(r["ttgir_excerpt"].splitlines()) <= tcc.EXCERPT_LINES
            assert 0 < r["compile_s"] < 60


def test_matmul_tile_uses_tensor_cores_and_tens_of_kb_of_shared_memory(compiled):
    """The float16 128x128x64 tile loop with num_stages=3 buffers its a and b tiles in shared
    memory: (128*64 + 64*128) * 2 bytes = 32 KB a stage, tens of KB in all; sm_90 uses
    wgmma (warp-group MMA), sm_80 mma.sync; 8 warps as the config says."""
    h100, a100 = compiled[("matmul_tile", "sm_90")], compiled[("matmul_tile", "sm_80")]
    for r in (h100, a100):
        assert 32 * 1024 <= r["shared_bytes"] <= 128 * 1024
        assert (r["num_warps"], r["num_stages"]) == (8, 3)
        assert "cp.async" in r["ptx_excerpt"]
    assert "wgmma" in h100["ptx_excerpt"] and "ttng.warp_group_dot" in h100["ttgir_excerpt"]
    assert "mma.sync" in a100["ptx_excerpt"] and "tt.dot" in a100["ttgir_excerpt"]
    assert "#mma" in h100["ttgir_excerpt"] and "ttg.local_alloc" in h100["ttgir_excerpt"]


def test_kernels_the_interpreter_runs_but_the_compiler_rejects(compiled):
    """A running sum or max that starts as a scalar and becomes a block: fine in NumPy, a
    type change of a loop-carried variable for the compiler, which names it and its line."""
    for name, var in (("running_sum_becomes_block", "acc"), ("running_max_becomes_block", "m")):
        for arch in ("sm_90", "sm_80"):
            r = compiled[(name, arch)]
            assert not r["ok"] and r["stage"] == "compile"
            assert f"Loop-carried variable {var}" in r["error"], r["error"]
            assert "for start in range(0, n, BLOCK):" in r["error"]
            assert r["registers"] is None and r["occupancy"] is None


def test_an_error_in_a_called_function_names_the_call_and_the_line(compiled):
    """The compiler's message through a call: the call site, then the helper's line."""
    error = compiled[("calls_a_rejected_helper", "sm_90")]["error"]
    assert error.splitlines() == [
        "calls_a_rejected_helper, line 3 of the def: "
        "tl.store(x_ptr + offsets, row_sum(tl.load(x_ptr + offsets)))",
        "row_sum, line 3 of the def: for _ in range(0, 2):",
        "AssertionError: Loop-carried variable total has initial type fp32 but is re-assigned to "
        "<['64'], fp32> in loop! Please make sure that the type stays consistent.",
    ]


def test_a_plain_global_is_recreated_and_the_compiler_refuses_it(recorded, compiled):
    """PLAIN_SCALE = 2 is re-created as it is, so the compiler gives its own reason."""
    assert "PLAIN_SCALE = 2" in recorded[-2]["source"]
    r = compiled[("reads_a_plain_global", "sm_80")]
    assert (r["ok"], r["stage"]) == (False, "compile")
    assert "Cannot access global variable PLAIN_SCALE from within @jit'ed function" in r["error"]


def test_a_rejected_kernel_does_not_stop_the_others(compiled):
    """The kernel recorded after the two rejected ones still compiled."""
    assert compiled[("tanh_kernel", "sm_90")]["ok"] and compiled[("tanh_kernel", "sm_80")]["ok"]


def test_libdevice_helpers_and_globals_are_recreated(recorded, compiled):
    """``libdevice.tanh``, a ``@triton.jit`` helper, a ``tl.constexpr`` global and ``math`` are
    in the re-created module, and it compiles."""
    source = recorded[-1]["source"]
    assert "import triton.language.extra.libdevice as libdevice" in source
    assert "import math" in source
    assert "LOG2E = tl.constexpr(1.4426950408889634)" in source
    assert "@triton.jit\ndef scaled(x, factor: tl.constexpr):" in source
    assert compiled[("tanh_kernel", "sm_90")]["registers"] > 0


def test_num_stages_changes_shared_memory_up_to_what_a_gpu_refuses(tmp_path):
    """The float16 tile loop with 2, 3 and 4 stages on sm_80, where Triton keeps num_stages - 1
    buffers of the a and b tiles: with 64x64x32 tiles one buffer is (64*32 + 32*64) * 2 bytes
    = 8 KB, so a third stage costs 8 KB more. With 64x64x256 tiles and 4 stages the buffers are
    3 * 64 KB = 192 KB: it compiles, and an A100 (163 KB a block) refuses to launch it."""
    a, b = torch.randn(64, 256).half(), torch.randn(256, 64).half()
    c = torch.empty(64, 64, dtype=torch.float16)
    variants = [(32, 2), (32, 3), (256, 4)]
    with tcc.record_launches() as launches:
        for block_k, stages in variants:
            strides = (*a.stride(), *b.stride(), *c.stride())
            matmul_tile[(1, 1)](a, b, c, 64, 64, 256, *strides, BLOCK_M=64, BLOCK_N=64,
                                BLOCK_K=block_k, num_stages=stages)  # fmt: skip
    assert [(r["constexprs"]["BLOCK_K"], r["num_stages"]) for r in launches] == variants
    two, three, refused = tcc.compile_launches(launches, archs=(80,), cache_dir=tmp_path)
    assert two["ok"] and three["ok"], (two["error"], three["error"])
    assert three["shared_bytes"] - two["shared_bytes"] == (64 * 32 + 32 * 64) * 2
    assert (refused["ok"], refused["stage"], refused["shared_bytes"]) == (False, "launch", 196608)
    assert refused["error"].startswith(
        "out of resource: shared memory, Required: 196608, Hardware limit: 166912."
    )
    assert refused["occupancy"]["blocks_per_sm"] == 0 and refused["registers"] > 0


def _compiled_kernel():
    """A kernel decorated with the interpreter off: a ``JITFunction``, compiled for a GPU."""
    before = os.environ.get(tc.INTERPRET_ENV)
    os.environ[tc.INTERPRET_ENV] = "0"
    try:

        @triton.jit
        def compiled_scale(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * alpha, mask=mask)

    finally:
        if before is None:
            os.environ.pop(tc.INTERPRET_ENV)
        else:
            os.environ[tc.INTERPRET_ENV] = before
    return compiled_scale


@pytest.mark.parametrize("recording_first", [True, False])
def test_a_jit_function_under_count_traffic_is_recorded_once(recording_first):
    """count_traffic runs a JITFunction through an interpreted copy: one record either way the
    blocks nest, the bytes are still counted, and both patches are gone afterwards."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    kernel = _compiled_kernel()
    runs = (JITFunction.run, InterpretedFunction.run)
    x, out = torch.randn(100), torch.empty(100)
    if recording_first:
        with tcc.record_launches() as launches, tc.count_traffic() as log:
            kernel[(1,)](x, out, 100, 2.0, BLOCK=128)
    else:
        with tc.count_traffic() as log, tcc.record_launches() as launches:
            kernel[(1,)](x, out, 100, 2.0, BLOCK=128)
    torch.testing.assert_close(out, 2 * x)
    assert log.total().loads_bytes == 400 and log.total().stores_bytes == 400
    assert [r["kernel"] for r in launches] == ["compiled_scale"]
    assert launches[0]["signature"]["alpha"] == "fp32"
    assert (JITFunction.run, InterpretedFunction.run) == runs


def test_arguments_map_to_triton_signature_types():
    """Tensors by dtype, ints i32 or i64 by value, floats fp32, bools u1; None and the int 1
    are specialized to constexprs; pointers 16-byte aligned and ints divisible by 16 noted."""
    t32 = torch.zeros(16)
    args = (
        t32,
        torch.zeros(4, dtype=torch.float16),
        torch.zeros(4, dtype=torch.bfloat16),
        torch.zeros(4, dtype=torch.int64),
        48,
        2**31 + 1,
        0.5,
        True,
        None,
        1,
    )
    with tcc.record_launches() as launches:
        try:
            arguments_kernel[(1,)](*args, BLOCK=16)
        except Exception as exc:  # noqa: BLE001
            # triton 3.6's interpreter cannot run a bool argument ("numpy data itemsize (32
            # bits) exceeds dtype primitive_bitwidth (1 bits)"); the launch is recorded first
            if "primitive_bitwidth" not in str(exc):
                raise
    (rec,) = launches
    assert rec["signature"] == {
        "t32": "*fp32",
        "t16": "*fp16",
        "tbf": "*bf16",
        "ti64": "*i64",
        "small": "i32",
        "big": "i64",
        "f": "fp32",
        "flag": "u1",
        "nothing": "constexpr",
        "one": "constexpr",
        "BLOCK": "constexpr",
    }
    assert rec["constexprs"] == {"nothing": None, "one": 1, "BLOCK": 16}
    assert {"t32", "small"} <= set(rec["divisible_by_16"]) and "big" not in rec["divisible_by_16"]


def test_a_global_that_cannot_be_recreated_is_reported_not_compiled(tmp_path):
    """A kernel reading a global tensor: the record says why, and compiling it says the same
    without starting the compiler on it."""
    x = torch.ones(4)
    with tcc.record_launches() as launches:
        with contextlib.suppress(Exception):  # whatever the interpreter makes of it
            reads_a_tensor_global[(1,)](x, BLOCK=4)
    (rec,) = launches
    assert rec["problems"] == [
        "cannot re-create global WEIGHTS of type Tensor: a kernel may read modules, @triton.jit "
        "functions, triton's own functions and constants (int, float, bool, str, None, "
        "tl.constexpr(...), tl dtypes)"
    ]
    (result,) = tcc.compile_launches(launches, archs=(90,), cache_dir=tmp_path)
    assert (result["ok"], result["stage"]) == (False, "record")
    assert "cannot re-create global WEIGHTS of type Tensor" in result["error"]


def test_a_compile_process_past_its_timeout_is_stopped_with_a_clear_error(recorded, tmp_path):
    """Nothing compiles in 0.2 s (the process needs about a second to start): every pair comes
    back ``timeout`` with the limit in the message."""
    results = tcc.compile_launches(recorded[:2], archs=(90,), timeout_s=0.2, cache_dir=tmp_path)
    assert [r["stage"] for r in results] == ["timeout", "timeout"]
    assert all(not r["ok"] for r in results)
    assert "did not finish within 0.2 s" in results[0]["error"]


def test_occupancy_from_registers_shared_memory_and_warps():
    """Worked by hand from the per-SM limits. 128 registers x 32 threads = 4096 a warp: 16
    warps' worth of the 65536 registers, 2 blocks of 8 warps. 96 KB + 1 KB reserved a block: 2
    fit in 228 KB (H100), 1 in 164 KB (A100)."""
    h100 = tcc.occupancy(128, 96 * 1024, 8, 90)
    assert (h100["blocks_per_sm"], h100["warps_per_sm"], h100["occupancy"]) == (2, 16, 0.25)
    assert h100["limited_by"] == ["registers", "shared memory"]
    a100 = tcc.occupancy(128, 96 * 1024, 8, 80)
    assert (a100["blocks_per_sm"], a100["limited_by"]) == (1, ["shared memory"])
    small = tcc.occupancy(32, 0, 4, 90)  # 1024 registers a warp: 64 warps; 16 blocks of 4
    assert (small["blocks_per_sm"], small["occupancy"]) == (16, 1.0)
    assert tcc.occupancy(16, 0, 1, 90)["limited_by"] == ["blocks"]  # 32 blocks of 1 warp
    assert tcc.occupancy(40, 0, 4, 90)["blocks_per_sm"] == 12  # 1280 a warp: 51 -> 48 warps
    too_big = tcc.occupancy(64, 228 * 1024, 4, 90)
    assert too_big["blocks_per_sm"] == 0
    assert too_big["launch_error"].startswith("out of resource: shared memory, Required: 233472")
    assert tcc.occupancy(255, 0, 16, 80)["launch_error"].startswith("out of resource: threads")
    with pytest.raises(ValueError, match="no per-SM limits for sm_70"):
        tcc.occupancy(32, 0, 4, 70)


def test_excerpts_keep_the_instructive_lines():
    """One line per kind of instruction, counted; declarations kept; at most max_lines."""
    ptx = "\n".join(
        [".reg .b32 \t%r<10>;", "\tmov.u32 %r1, %tid.x;"]
        + ["\t@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];"] * 3
        + ["\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {...};", "\tadd.s32 %r2, %r1, 1;"]
    )
    assert tcc.excerpt(ptx, "ptx").splitlines() == [
        ".reg .b32 \t%r<10>;",
        "@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];  // x3",
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {...};",
    ]
    ttgir = (
        '#blocked = #ttg.blocked<{sizePerThread = [4]}>\n#loc = loc("x.py":1:0)\n'
        "    %0 = tt.load %ptr, %mask : tensor<128x!tt.ptr<f32>, #blocked> loc(#loc3)\n"
        "    %1 = arith.addf %0, %0 : tensor<128xf32, #blocked>\n"
    )
    assert tcc.excerpt(ttgir, "ttgir").splitlines() == [
        "#blocked = #ttg.blocked<{sizePerThread = [4]}>",
        "%0 = tt.load %ptr, %mask : tensor<128x!tt.ptr<f32>, #blocked>",
    ]
    many = "\n".join(f".reg .b32 %r{i};" for i in range(30))
    lines = tcc.excerpt(many, "ptx", max_lines=5).splitlines()
    assert len(lines) == 5 and lines[-1] == "// ... 26 more"
    with pytest.raises(ValueError):
        tcc.excerpt("", "sass")
