"""Triton kernels under the interpreter on the CPU: ``grader.runtime.triton_cpu``'s traffic counter.

Each kernel's expected bytes are computed here from its shapes and blocks, independently of the
counter. The kernels are decorated inside ``triton_cpu.interpreter()``, so this process's
``TRITON_INTERPRET`` is left as it was (other tests may run Inductor's real kernels on a GPU).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from grader.runtime import triton_cpu as tc  # noqa: E402

F32 = 4  # bytes per float32 element

with tc.interpreter():

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + y, mask=mask)

    @triton.jit
    def add_kernel_no_mask(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))

    @triton.jit
    def softmax_once(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)

    @triton.jit
    def softmax_twice(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
        m = tl.max(x, axis=0)
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))  # again
        e = tl.exp(x - m)
        tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                      BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):  # fmt: skip
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            rk = k0 + tl.arange(0, BK)
            a_mask = (rm[:, None] < M) & (rk[None, :] < K)
            b_mask = (rk[:, None] < K) & (rn[None, :] < N)
            a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=a_mask, other=0.0)
            b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=b_mask, other=0.0)
            acc += tl.dot(a, b)
        c_mask = (rm[:, None] < M) & (rn[None, :] < N)
        tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=c_mask)

    @triton.jit
    def sum_kernel(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
        tl.atomic_add(total_ptr, tl.sum(x, axis=0))

    @triton.jit
    def sum_kernel_without_other(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets, mask=offsets < n)  # masked-off lanes: undefined on a GPU
        tl.atomic_add(total_ptr, tl.sum(x, axis=0))


def _compiled_add_kernel():
    """The masked add, decorated with the interpreter off: a kernel compiled for a GPU."""
    before = os.environ.get(tc.INTERPRET_ENV)
    os.environ[tc.INTERPRET_ENV] = "0"
    try:

        @triton.jit
        def compiled_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
            offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offsets < n
            x = tl.load(x_ptr + offsets, mask=mask)
            tl.store(out_ptr + offsets, x + tl.load(y_ptr + offsets, mask=mask), mask=mask)

    finally:
        if before is None:
            os.environ.pop(tc.INTERPRET_ENV)
        else:
            os.environ[tc.INTERPRET_ENV] = before
    return compiled_add


def _add(kernel, n, block, grid=None):
    torch.manual_seed(0)
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n,), 7.0)  # a sentinel: what no store overwrote stays 7
    grid = (triton.cdiv(n, block),) if grid is None else grid
    traffic = tc.run_counted(kernel, grid, x, y, out, n, BLOCK=block)
    return traffic, x, y, out


@pytest.mark.parametrize("n", [1000, 1, 0, 256])
def test_masked_add_loads_two_and_stores_one_element_per_index(n):
    """loads = 2·n·4 bytes and stores = n·4 for n not a multiple of BLOCK, one element, empty."""
    traffic, x, y, out = _add(add_kernel, n, 128)
    assert traffic.in_bounds and traffic.out_of_bounds == []
    assert (traffic.loads_bytes, traffic.stores_bytes) == (2 * n * F32, n * F32)
    assert traffic.per_tensor["x_ptr"] == tc.TensorTraffic(n * F32, 0, n * F32, 0, n * F32)
    assert traffic.per_tensor["out_ptr"].distinct_stored_bytes == n * F32
    assert traffic.launches == [("add_kernel", (triton.cdiv(n, 128), 1, 1))]
    torch.testing.assert_close(out, x + y)


def test_masked_off_lanes_of_a_load_without_other_are_nan_while_counting():
    """tl.load without other leaves masked-off lanes undefined (its docstring); the interpreter
    gives 0, so a sum over them looks right. While counting they are NaN: the sum shows it. With
    other=0.0, and where only a masked store uses them (add_kernel), results stay exact."""
    x = torch.randn(1000)
    for kernel, finite in ((sum_kernel, True), (sum_kernel_without_other, False)):
        total = torch.zeros(1)
        traffic = tc.run_counted(kernel, (triton.cdiv(1000, 128),), x, total, 1000, BLOCK=128)
        assert traffic.in_bounds
        assert bool(torch.isfinite(total).all()) is finite
        if finite:
            torch.testing.assert_close(total, x.sum().reshape(1), rtol=1e-5, atol=1e-4)
    with tc.interpreter():  # the interpreter alone still fills them with 0
        total = torch.zeros(1)
        sum_kernel_without_other[(triton.cdiv(1000, 128),)](x, total, 1000, BLOCK=128)
        torch.testing.assert_close(total, x.sum().reshape(1), rtol=1e-5, atol=1e-4)


def test_add_without_mask_is_reported_out_of_bounds_and_touches_nothing_outside():
    """The missing mask: the last block's 24 lanes past n are reported for each of the three
    pointers, never dereferenced; the in-bounds lanes are counted and computed as usual."""
    n, block = 1000, 128
    past = triton.cdiv(n, block) * block - n
    traffic, x, y, out = _add(add_kernel_no_mask, n, block)
    assert not traffic.in_bounds
    assert traffic.out_of_bounds_lanes == 3 * past
    assert [(r.op, r.lanes, r.program_id) for r in traffic.out_of_bounds] == [
        ("load", past, (7, 0, 0)),
        ("load", past, (7, 0, 0)),
        ("store", past, (7, 0, 0)),
    ]
    assert "past the end of `x_ptr`" in traffic.out_of_bounds[0].describe()
    assert "mask" in traffic.out_of_bounds[0].describe()
    assert (traffic.loads_bytes, traffic.stores_bytes) == (2 * n * F32, n * F32)
    torch.testing.assert_close(out, x + y)


def test_add_without_mask_is_in_bounds_when_n_is_a_multiple_of_block():
    """No false alarm: the same kernel is fine where every lane is inside."""
    traffic, x, y, out = _add(add_kernel_no_mask, 512, 128)
    assert traffic.in_bounds
    assert traffic.loads_bytes == 2 * 512 * F32


def test_reading_past_one_tensor_into_its_neighbour_is_out_of_bounds():
    """Two views of one buffer, side by side: lanes past the end of `x_ptr` land inside `y_ptr`'s
    memory, and are still out of bounds (a load belongs to the tensor most of its lanes hit)."""
    n, block = 100, 64
    buffer = torch.arange(2.0 * block * 2)
    x, y = buffer[:n], buffer[n : 2 * n]
    out = torch.zeros(n)
    traffic = tc.run_counted(add_kernel_no_mask, (2,), x, y, out, n, BLOCK=block)
    first = traffic.out_of_bounds[0]
    assert first.op == "load" and first.lanes == 2 * block - n
    assert "past the end of `x_ptr`" in first.where and "inside `y_ptr`" in first.where


def test_raise_mode_stops_at_the_first_out_of_bounds_access():
    x, y, out = torch.randn(100), torch.randn(100), torch.zeros(100)
    with pytest.raises(tc.OutOfBoundsError, match=r"past the end of `x_ptr`") as info:
        with tc.count_traffic(on_out_of_bounds="raise"):
            add_kernel_no_mask[(2,)](x, y, out, 100, BLOCK=64)
    assert info.value.record.lanes == 28
    with pytest.raises(ValueError, match="record"):
        with tc.count_traffic(on_out_of_bounds="ignore"):
            pass


def test_grid_missing_the_last_block_leaves_the_output_partly_unwritten():
    """grid = n // BLOCK, not cdiv(n, BLOCK): stores < n·4 and the tail keeps its old value."""
    n, block = 1000, 128
    traffic, x, y, out = _add(add_kernel, n, block, grid=(n // block,))
    written = (n // block) * block
    assert traffic.in_bounds
    assert traffic.stores_bytes == written * F32 < n * F32
    assert traffic.per_tensor["out_ptr"].distinct_stored_bytes == written * F32
    assert traffic.per_tensor["out_ptr"].nbytes == n * F32
    assert torch.equal(out[written:], torch.full((n - written,), 7.0))


def test_softmax_reading_each_row_twice_loads_twice_the_bytes():
    """Same values, same distinct bytes; the second read of each row costs M·N·4 more bytes."""
    rows, cols, block = 6, 100, 128
    x = torch.randn(rows, cols)
    counted = {}
    for kernel in (softmax_once, softmax_twice):
        out = torch.empty_like(x)
        counted[kernel] = tc.run_counted(kernel, (rows,), x, out, x.stride(0), cols, BLOCK=block)
        torch.testing.assert_close(out, torch.softmax(x, dim=1))
    once, twice = counted[softmax_once], counted[softmax_twice]
    assert once.loads_bytes == rows * cols * F32 and once.stores_bytes == rows * cols * F32
    assert twice.loads_bytes - once.loads_bytes == rows * cols * F32
    assert twice.per_tensor["x_ptr"].distinct_loaded_bytes == rows * cols * F32


def test_tiled_matmul_loads_what_its_tiling_implies():
    """Each (pid_m, pid_n) program loads, per K block, its A tile and its B tile, masked at the
    edges: the expected bytes are counted here tile by tile from the shapes and blocks."""
    M, N, K, BM, BN, BK = 40, 36, 50, 16, 16, 16
    torch.manual_seed(0)
    a, b = torch.randn(M, K), torch.randn(K, N)
    c = torch.empty(M, N)
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    traffic = tc.run_counted(
        matmul_kernel, grid, a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
        BM=BM, BN=BN, BK=BK,
    )  # fmt: skip
    a_bytes = b_bytes = 0
    for pm in range(grid[0]):
        rows = min(BM, M - pm * BM)
        for pn in range(grid[1]):
            cols_ = min(BN, N - pn * BN)
            for k0 in range(0, K, BK):
                depth = min(BK, K - k0)
                a_bytes += rows * depth * F32
                b_bytes += depth * cols_ * F32
    assert traffic.per_tensor["a_ptr"].loaded_bytes == a_bytes
    assert traffic.per_tensor["b_ptr"].loaded_bytes == b_bytes
    assert traffic.loads_bytes == a_bytes + b_bytes
    # every A element is read once per column block, every B element once per row block
    assert a_bytes == grid[1] * M * K * F32 and b_bytes == grid[0] * K * N * F32
    assert traffic.stores_bytes == M * N * F32 and traffic.in_bounds
    torch.testing.assert_close(c, a @ b, atol=1e-4, rtol=1e-4)
    c2 = torch.empty(M, N)  # uncounted, with a loop bound read from an argument (triton 3.6 too)
    matmul_kernel[grid](
        a, b, c2, M, N, K, *a.stride(), *b.stride(), *c2.stride(), BM=BM, BN=BN, BK=BK
    )
    torch.testing.assert_close(c2, c)


def test_an_atomic_add_reads_and_writes_its_element_once_per_program():
    n, block = 300, 128
    x, total = torch.randn(n), torch.zeros(1)
    traffic = tc.run_counted(sum_kernel, (triton.cdiv(n, block),), x, total, n, BLOCK=block)
    programs = triton.cdiv(n, block)
    assert traffic.per_tensor["total_ptr"] == tc.TensorTraffic(
        programs * F32, programs * F32, F32, F32, F32
    )
    assert traffic.per_tensor["x_ptr"].loaded_bytes == n * F32
    torch.testing.assert_close(total, x.sum().reshape(1), atol=1e-4, rtol=1e-4)


def test_a_wrapper_that_launches_twice_is_logged_per_launch():
    """The check runs a student's function, not the kernel: every launch inside is logged."""

    def add3(x, y, z):
        tmp, out = torch.empty_like(x), torch.empty_like(x)
        grid = (triton.cdiv(x.numel(), 64),)
        add_kernel[grid](x, y, tmp, x.numel(), BLOCK=64)
        add_kernel[grid](tmp, z, out, x.numel(), BLOCK=64)
        return out

    x, y, z = torch.randn(100), torch.randn(100), torch.randn(100)
    with tc.count_traffic() as log:
        out = add3(x, y, z)
    torch.testing.assert_close(out, x + y + z)
    assert len(log) == 2 and [t.loads_bytes for t in log] == [800, 800]
    total = log.total()
    assert (total.loads_bytes, total.stores_bytes) == (1600, 800)
    assert total.per_tensor["x_ptr"].loaded_bytes == 800
    assert [name for name, _ in total.launches] == ["add_kernel", "add_kernel"]


def _pristine():
    """Triton's interpreter and JIT entry points as they are outside a count_traffic block."""
    from triton.runtime import interpreter as interp
    from triton.runtime.jit import JITFunction

    names = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "set_grid_dim")
    return (
        interp.GridExecutor.__call__,
        interp.GridExecutor._init_args_hst,
        JITFunction.run,
        JITFunction.__call__,
        {n: n in vars(interp.interpreter_builder) for n in names},
    )


def test_the_wrappers_are_removed_afterwards_even_after_an_error():
    before = _pristine()
    assert not any(before[-1].values())
    traffic, *_ = _add(add_kernel, 300, 128)
    assert _pristine() == before
    x, y, out = torch.randn(300), torch.randn(300), torch.empty(300)
    with pytest.raises(tc.OutOfBoundsError):
        with tc.count_traffic(on_out_of_bounds="raise"):
            add_kernel_no_mask[(3,)](x, y, out, 300, BLOCK=128)
    assert _pristine() == before
    add_kernel[(3,)](x, y, out, 300, BLOCK=128)  # uncounted: runs as usual
    torch.testing.assert_close(out, x + y)
    again, *_ = _add(add_kernel, 300, 128)
    assert again == traffic
    with tc.count_traffic(), pytest.raises(RuntimeError, match="do not nest"):
        with tc.count_traffic():
            pass


def test_a_kernel_compiled_for_a_gpu_is_named_and_still_counted_under_the_interpreter():
    compiled = _compiled_add_kernel()
    assert not tc.is_interpreted(compiled) and tc.is_interpreted(add_kernel)
    with pytest.raises(tc.KernelNotInterpreted, match=r"run the cell that defines `compiled_add`"):
        tc.ensure_interpreted(compiled)
    tc.ensure_interpreted(add_kernel)
    traffic, x, y, out = _add(compiled, 300, 128)
    assert (traffic.loads_bytes, traffic.stores_bytes) == (2400, 1200)
    torch.testing.assert_close(out, x + y)
    with pytest.raises(tc.KernelNotInterpreted), tc.count_traffic(interpret=False):
        compiled[(3,)](x, y, out, 300, BLOCK=128)


def test_interpreter_block_restores_the_environment():
    before = os.environ.get(tc.INTERPRET_ENV)
    with tc.interpreter():
        assert tc.interpreter_on()
    assert os.environ.get(tc.INTERPRET_ENV) == before


def test_use_interpreter_after_triton_and_inductor_were_imported(tmp_path):
    """In a fresh process that imported torch._inductor (and so triton) first: setting the
    variable late makes new kernels interpreted, but the library's own @jit helpers (tl.zeros,
    tl.sum) were compiled at import and an interpreted kernel cannot call them;
    use_interpreter() makes that work (libdevice too), names a kernel decorated too early, and
    as_interpreted() runs that one anyway."""
    script = tmp_path / "late.py"
    script.write_text(
        textwrap.dedent(
            """
            import os
            import torch, torch._inductor, triton, triton.language as tl
            from grader.runtime import triton_cpu as tc

            @triton.jit
            def early(x_ptr, BLOCK: tl.constexpr):
                tl.store(x_ptr + tl.arange(0, BLOCK), tl.arange(0, BLOCK).to(tl.float32))

            assert not tc.interpreter_on()
            os.environ["TRITON_INTERPRET"] = "1"  # late, by hand

            @triton.jit
            def late(x_ptr, BLOCK: tl.constexpr):
                offsets = tl.arange(0, BLOCK)
                x = tl.zeros((BLOCK,), dtype=tl.float32) + offsets
                tl.store(x_ptr + offsets, x + tl.sum(x, axis=0) * 0)

            x = torch.zeros(8)
            try:
                late[(1,)](x, BLOCK=8)
            except Exception as e:
                print("BY HAND:", e)
            tc.use_interpreter()
            late[(1,)](x, BLOCK=8)
            assert x.tolist() == list(range(8)), x
            print("LATE OK", type(late).__name__)

            from triton.language.extra import libdevice

            @triton.jit
            def with_libdevice(x_ptr, BLOCK: tl.constexpr):
                offsets = tl.arange(0, BLOCK)
                tl.store(x_ptr + offsets, libdevice.exp2(tl.load(x_ptr + offsets)))

            with_libdevice[(1,)](x, BLOCK=8)
            assert x.tolist() == [2.0**i for i in range(8)], x
            print("LIBDEVICE OK")
            try:
                tc.ensure_interpreted(early)
            except tc.KernelNotInterpreted as e:
                print("EARLY:", e)
            y = torch.zeros(8)
            tc.as_interpreted(early)[(1,)](y, BLOCK=8)
            assert y.tolist() == list(range(8)), y
            print("EARLY OK")
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k != tc.INTERPRET_ENV}
    repo = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [repo, env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "BY HAND: RuntimeError(\"Cannot call @triton.jit'd outside" in done.stdout
    assert "LATE OK InterpretedFunction" in done.stdout
    assert "LIBDEVICE OK" in done.stdout
    assert "EARLY: `early` was defined while Triton's interpreter was off" in done.stdout
    assert "EARLY OK" in done.stdout


# ---------------------------------------------------------------------------------------------
# libdevice under the interpreter

from triton.language.extra import libdevice  # noqa: E402
from triton.language.extra.cuda import libdevice as cuda_libdevice  # noqa: E402
from triton.language.extra.libdevice import erf as imported_erf  # noqa: E402
from triton.runtime.errors import InterpreterError  # noqa: E402

with tc.interpreter():

    @triton.jit
    def libdevice_map(x_ptr, y_ptr, out_ptr, n, NAME: tl.constexpr, BLOCK: tl.constexpr):
        """out = libdevice.NAME(x) (or NAME(x, y) where the function takes two arguments)."""
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask)
        if NAME in ("pow", "atan2", "hypot", "fmod", "remainder", "copysign", "nextafter"):
            out = getattr(libdevice, NAME)(x, tl.load(y_ptr + offsets, mask=mask))
        else:
            out = getattr(libdevice, NAME)(x)
        tl.store(out_ptr + offsets, out, mask=mask)

    @triton.jit
    def libdevice_any(a_ptr, b_ptr, c_ptr, d_ptr, out_ptr, NAME: tl.constexpr,
                      ARITY: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
        """out = NAME(a, b, ...) with ARITY arguments; the result has out's element type."""
        offsets = tl.arange(0, BLOCK)
        fn = getattr(libdevice, NAME)
        a = tl.load(a_ptr + offsets)
        if ARITY == 1:
            y = fn(a)
        elif ARITY == 2:
            y = fn(a, tl.load(b_ptr + offsets))
        elif ARITY == 3:
            y = fn(a, tl.load(b_ptr + offsets), tl.load(c_ptr + offsets))
        else:
            y = fn(a, tl.load(b_ptr + offsets), tl.load(c_ptr + offsets), tl.load(d_ptr + offsets))
        tl.static_assert(y.dtype == out_ptr.dtype.element_ty)
        tl.store(out_ptr + offsets, y)

    @triton.jit
    def gelu_libdevice(x_ptr, bias_ptr, tanh_ptr, erf_ptr, n, BLOCK: tl.constexpr):
        """GELU both ways, as a student writes them: libdevice.tanh, and erf imported by name."""
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        x = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets, mask=mask)
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        tl.store(tanh_ptr + offsets, 0.5 * x * (1.0 + libdevice.tanh(inner)), mask=mask)
        tl.store(
            erf_ptr + offsets, 0.5 * x * (1.0 + imported_erf(x * 0.7071067811865476)), mask=mask
        )

    @triton.jit
    def softplus_helper(x):
        return tl.extra.cuda.libdevice.log1p(tl.extra.cuda.libdevice.exp(x))

    @triton.jit
    def softplus_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
        """Calls libdevice only through a @jit helper (the attribute path of tl.extra)."""
        offsets = tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, softplus_helper(tl.load(x_ptr + offsets)))


def _libdevice(name, x, y=None):
    out = torch.empty_like(x)
    n = x.numel()
    libdevice_map[(triton.cdiv(n, 256),)](x, x if y is None else y, out, n, NAME=name, BLOCK=256)
    return out


@pytest.mark.parametrize(
    "name, reference, domain",
    [
        ("tanh", torch.tanh, lambda x: 4 * x),
        ("erf", torch.erf, lambda x: x),
        ("exp", torch.exp, lambda x: 3 * x),
        ("log1p", torch.log1p, lambda x: x.abs() * 5),
        ("pow", None, lambda x: x.abs() + 0.1),
    ],
)
def test_libdevice_functions_match_torch_on_float32_blocks(name, reference, domain):
    """1000 float32 elements in blocks of 256 (the last one masked): within 1e-6 of torch."""
    torch.manual_seed(0)
    x, y = domain(torch.randn(1000)), torch.randn(1000) * 3
    out = _libdevice(name, x, y)
    want = torch.pow(x, y) if name == "pow" else reference(x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    "name, reference, low, high",
    [
        ("tanh", math.tanh, -20, 20), ("erf", math.erf, -4, 4), ("erfc", math.erfc, -4, 9),
        ("expm1", math.expm1, -30, 30), ("log1p", math.log1p, -0.9, 50),
        ("lgamma", math.lgamma, 0.1, 30), ("tgamma", math.gamma, -4.5, 20),
        ("exp2", lambda v: 2.0**v, -60, 60), ("asinh", math.asinh, -50, 50),
        ("atanh", math.atanh, -0.99, 0.99), ("cosh", math.cosh, -20, 20),
        ("pow", math.pow, 0.1, 9), ("atan2", math.atan2, -5, 5), ("hypot", math.hypot, -5, 5),
        ("fmod", math.fmod, -20, 20), ("remainder", math.remainder, -20, 20),
        ("copysign", math.copysign, -3, 3), ("nextafter", math.nextafter, -3, 3),
    ],
)  # fmt: skip
def test_libdevice_in_float64_matches_the_standard_library(name, reference, low, high):
    """float64 blocks against Python's math (C's libm), an implementation independent of NumPy's
    and torch's: within a few ulp."""
    torch.manual_seed(1)
    x = torch.empty(300, dtype=torch.float64).uniform_(low, high)
    y = torch.empty(300, dtype=torch.float64).uniform_(-3, 3)
    binary = name in ("pow", "atan2", "hypot", "fmod", "remainder", "copysign", "nextafter")
    out = _libdevice(name, x, y if binary else None)
    args = zip(x.tolist(), y.tolist()) if binary else ((v,) for v in x.tolist())
    want = torch.tensor([reference(*a) for a in args], dtype=torch.float64)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, want, rtol=1e-13, atol=1e-300)


def _cuda_libdevice_signatures():
    """(name, argument types, result type) of every function CUDA's libdevice module declares,
    read from its source: each is a `core.extern_elementwise` with a dict of signatures, whose
    result a few convert (`isnan`, `isinf`, `signbit`, `finitef`: `.to(core.int1)`)."""
    import ast
    import inspect

    for fn in ast.parse(inspect.getsource(cuda_libdevice)).body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        result = fn.body[-1].value
        converted = None
        if isinstance(result.func, ast.Attribute) and result.func.attr == "to":
            converted = result.args[0].attr
        for table in (n for n in ast.walk(fn) if isinstance(n, ast.Dict)):
            for key, value in zip(table.keys, table.values):
                types = tuple(t.args[0].value for t in key.elts)
                yield fn.name, types, converted or value.elts[1].args[0].value


_TORCH_TYPES = {"fp32": torch.float32, "fp64": torch.float64, "int32": torch.int32,
                "int64": torch.int64, "uint32": torch.uint32, "uint64": torch.uint64,
                "int1": torch.bool}  # fmt: skip
_DIRECTED = ("rz", "rd", "ru")
#: What has no NumPy equivalent (the module docstring says why): (name, argument types).
_UNSUPPORTED = (
    {("rcp64h", ("fp64",)), ("jn", ("int32", "fp32")), ("jn", ("int32", "fp64")),
     ("yn", ("int32", "fp32")), ("yn", ("int32", "fp64"))}
    | {(f"{op}_{m}", ("fp64",) * k) for op, k in [("add", 2), ("sub", 2), ("mul", 2), ("div", 2),
                                                 ("rcp", 1), ("sqrt", 1), ("fma", 3)]
       for m in _DIRECTED}
    | {(f"{src}2{dst}_{m}", (t,)) for src, t in [("ll", "int64"), ("ull", "uint64")]
       for dst in ("float", "double") for m in _DIRECTED}
)  # fmt: skip


def test_every_cuda_libdevice_function_runs_with_its_declared_result_type_or_is_named():
    """Each of CUDA's libdevice signatures (313 in triton 3.8), on a block of 8: the result has
    the type CUDA declares, or the launch stops with LibdeviceNotSupported naming the function;
    exactly the documented ones do."""
    unsupported = set()
    signatures = list(_cuda_libdevice_signatures())
    assert len(signatures) > 250
    for name, types, result in signatures:
        args = [
            (torch.rand(8, dtype=torch.float64) * 0.8 + 0.1).to(_TORCH_TYPES[t])
            if t.startswith("fp")
            else torch.arange(1, 9).to(_TORCH_TYPES[t])
            for t in types
        ]
        padded = args + [args[0]] * (4 - len(args))
        out = torch.empty(8, dtype=_TORCH_TYPES[result])
        try:
            libdevice_any[(1,)](*padded, out, NAME=name, ARITY=len(args), BLOCK=8)
        except InterpreterError as e:
            assert isinstance(e.__cause__, tc.LibdeviceNotSupported), (name, types, e)
            assert f"libdevice.{name} is not supported under Triton's interpreter" in str(e)
            unsupported.add((name, types))
    assert unsupported == _UNSUPPORTED


def test_libdevice_conversions_and_bits_follow_cuda():
    """Integer results: saturating float-to-int conversions (NaN gives 0), isnan as int1, ilogb's
    special values, the bit functions on int32; a directed rounding of float32 arithmetic."""
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 2.5, -2.5, -0.7])
    out = torch.empty(8, dtype=torch.int32)
    libdevice_any[(1,)](special, special, special, special, out, NAME="float2int_rn", ARITY=1,
                        BLOCK=8)  # fmt: skip
    assert out.tolist() == [0, 2**31 - 1, -(2**31), 2**31 - 1, -(2**31), 2, -2, -1]
    flags = torch.empty(8, dtype=torch.bool)
    libdevice_any[(1,)](special, special, special, special, flags, NAME="isnan", ARITY=1, BLOCK=8)
    assert flags.tolist() == [True] + [False] * 7
    libdevice_any[(1,)](special, special, special, special, out, NAME="ilogb", ARITY=1, BLOCK=8)
    assert out.tolist() == [-(2**31), 2**31 - 1, 2**31 - 1, 31, 31, 1, 1, -1]
    ints = torch.tensor([0, 1, 2, 3, -1, 2**31 - 1, -(2**31), 12345678], dtype=torch.int32)
    expected = {
        "clz": [32, 31, 30, 30, 0, 1, 0, 8],
        "popc": [0, 1, 1, 2, 32, 31, 1, 12],
        "ffs": [0, 1, 2, 1, 1, 1, 32, 2],
        "brev": [0, -(2**31), 2**30, -(2**30), -1, -2, 1, 1921400064],
    }
    for name, want in expected.items():
        libdevice_any[(1,)](ints, ints, ints, ints, out, NAME=name, ARITY=1, BLOCK=8)
        assert out.tolist() == want, name
    one, tiny = torch.ones(8), torch.full((8,), 1e-30)
    up, down = torch.empty(8), torch.empty(8)
    libdevice_any[(1,)](one, tiny, one, one, up, NAME="add_ru", ARITY=2, BLOCK=8)
    libdevice_any[(1,)](one, tiny, one, one, down, NAME="add_rd", ARITY=2, BLOCK=8)
    assert up[0].item() == 1.0 + 2**-23  # the next float32 above 1
    assert down[0].item() == 1.0


def test_a_kernel_using_libdevice_is_counted_as_usual_and_computes_gelu():
    n, block = 1000, 256
    torch.manual_seed(0)
    x, bias = torch.randn(n), torch.randn(n)
    with_tanh, with_erf = torch.empty(n), torch.empty(n)
    with tc.count_traffic() as log:
        gelu_libdevice[(triton.cdiv(n, block),)](x, bias, with_tanh, with_erf, n, BLOCK=block)
    traffic = log.total()
    assert (traffic.loads_bytes, traffic.stores_bytes) == (2 * n * F32, 2 * n * F32)
    assert traffic.per_tensor["tanh_ptr"].distinct_stored_bytes == n * F32
    assert traffic.in_bounds and traffic.race_free
    z = x + bias
    gelu = torch.nn.functional.gelu
    torch.testing.assert_close(with_tanh, gelu(z, approximate="tanh"), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(with_erf, gelu(z), rtol=1e-5, atol=1e-6)


def test_libdevice_is_restored_after_each_launch_and_reached_through_helpers():
    """A @jit helper reaching tl.extra.cuda.libdevice works from a kernel that does not name
    libdevice; afterwards the modules, this module's imported name and the interpreter's
    builder are as before (a GPU compiler finds libdevice untouched)."""
    from triton.runtime import interpreter as interp

    def state():
        return (
            dict(vars(libdevice)),
            dict(vars(cuda_libdevice)),
            interp.InterpreterBuilder.create_extern_elementwise,
            globals()["imported_erf"],
        )

    x = torch.linspace(-5, 5, 16)
    out = torch.empty(16)
    softplus_kernel[(1,)](x, out, BLOCK=16)  # tc.interpreter() installed the support once
    before = state()
    softplus_kernel[(1,)](x, out, BLOCK=16)
    torch.testing.assert_close(out, torch.nn.functional.softplus(x), rtol=1e-6, atol=0)
    _libdevice("tanh", x)
    assert state() == before and tc._LAUNCH_SCOPE == []
    assert libdevice.tanh(x) is None  # outside a launch the stub is the stub
    with pytest.raises(ValueError, match="_semantic"):
        cuda_libdevice.tanh(x)
    jn = torch.empty(8)
    with pytest.raises(InterpreterError, match=r"libdevice\.jn is not supported") as info:
        libdevice_any[(1,)](torch.arange(8, dtype=torch.int32), x[:8], x, x, jn, NAME="jn",
                            ARITY=2, BLOCK=8)  # fmt: skip
    assert isinstance(info.value.__cause__, tc.LibdeviceNotSupported)
    assert state() == before and tc._LAUNCH_SCOPE == []


# ---------------------------------------------------------------------------------------------
# Races between program instances

with tc.interpreter():

    @triton.jit
    def accumulate_rows(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        """Every program load-add-stores its block of x into the same out[0:BLOCK], without an
        atomic (the FlashAttention-backward dQ mistake)."""
        cols = tl.arange(0, BLOCK)
        offsets = tl.program_id(0) * BLOCK + cols
        x = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
        tl.store(out_ptr + cols, tl.load(out_ptr + cols) + x)

    @triton.jit
    def accumulate_2d(x_ptr, out_ptr, BLOCK: tl.constexpr):
        """Programs (i, j) for j = 0, 1 both add into out row i: races within each row only."""
        cols = tl.arange(0, BLOCK)
        row = out_ptr + tl.program_id(0) * BLOCK + cols
        x = tl.load(x_ptr + (tl.program_id(0) * 2 + tl.program_id(1)) * BLOCK + cols)
        tl.store(row, tl.load(row) + x)

    @triton.jit
    def shift_in_place(x_ptr, n, BLOCK: tl.constexpr):
        """x[i] = x[i + 1] in place, block by block: the last lane of each block reads the first
        element of the next program's block before that program overwrites it."""
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        nxt = tl.load(x_ptr + offsets + 1, mask=offsets + 1 < n, other=0.0)
        tl.store(x_ptr + offsets, nxt, mask=offsets < n)

    @triton.jit
    def rewrite_own_block(x_ptr, out_ptr, BLOCK: tl.constexpr):
        """Each program stores its block twice and reads it back in between: its own data."""
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))
        tl.store(out_ptr + offsets, tl.load(out_ptr + offsets) * 2.0)

    @triton.jit
    def accumulate_under_lock(x_ptr, out_ptr, lock_ptr, BLOCK: tl.constexpr):
        """Triton's layer-norm-backward pattern: spin on atomic_cas, load-add-store, release."""
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + tl.program_id(0) * BLOCK + cols)
        while tl.atomic_cas(lock_ptr, 0, 1) == 1:
            pass
        tl.store(out_ptr + cols, tl.load(out_ptr + cols) + x)
        tl.atomic_xchg(lock_ptr, 0)


def test_an_atomic_reduction_and_the_kernels_above_have_no_race():
    n, block = 1000, 128
    x, total = torch.randn(n), torch.zeros(1)
    traffic = tc.run_counted(sum_kernel, (triton.cdiv(n, block),), x, total, n, BLOCK=block)
    assert traffic.races == [] and traffic.race_free
    traffic, *_ = _add(add_kernel, n, block)
    assert traffic.race_free
    out = torch.empty(6, 100)
    softmax = tc.run_counted(softmax_twice, (6,), torch.randn(6, 100), out, 100, 100, BLOCK=128)
    assert softmax.race_free


def test_load_add_store_into_a_shared_output_races_three_ways():
    """8 programs add into the same 128 elements: here the sum is right (they run in turn), on
    a GPU it is not; every element is stored by two instances, loaded after another stored it,
    and stored after another loaded it."""
    n, block = 1000, 128
    torch.manual_seed(0)
    x, out = torch.randn(n), torch.zeros(block)
    traffic = tc.run_counted(accumulate_rows, (8,), x, out, n, BLOCK=block)
    padded = torch.cat([x, torch.zeros(8 * block - n)]).reshape(8, block)
    torch.testing.assert_close(out, padded.sum(0))  # right here, by luck of the order
    assert not traffic.race_free and traffic.in_bounds
    assert traffic.races == [
        tc.Race("accumulate_rows", "out_ptr", kind, block, ((0, 0, 0), (1, 0, 0), 0))
        for kind in ("write-write", "read-after-write", "write-after-read")
    ]
    text = traffic.races[0].describe()
    assert "(0, 0, 0) and (1, 0, 0) both stored element 0 of `out_ptr`" in text
    assert "tl.atomic_add" in text and "128 element(s)" in text
    with tc.count_traffic() as log:  # two launches: the races of each, in order
        accumulate_rows[(8,)](x, out, n, BLOCK=block)
        add_kernel[(1,)](x, x, torch.empty(n), 100, BLOCK=128)
        accumulate_rows[(2,)](x, out, n, BLOCK=block)
    assert [len(t.races) for t in log] == [3, 0, 3] and len(log.total().races) == 6


def test_races_on_a_2d_grid_name_the_two_programs_and_the_element():
    block = 16
    x, out = torch.randn(3 * 2 * block), torch.zeros(3 * block)
    traffic = tc.run_counted(accumulate_2d, (3, 2), x, out, BLOCK=block)
    write_write = traffic.races[0]
    assert write_write.kind == "write-write" and write_write.elements == 3 * block
    assert write_write.example == ((0, 0, 0), (0, 1, 0), 0)
    torch.testing.assert_close(out, x.reshape(3, 2, block).sum(1).reshape(-1))


def test_reading_a_neighbours_block_it_later_overwrites_is_a_write_after_read():
    """In place, x[i] = x[i+1]: right here (program 0 reads x[128] before program 1 writes
    it); on a GPU program 1 may write first."""
    n, block = 1000, 128
    x = torch.arange(float(n))
    traffic = tc.run_counted(shift_in_place, (triton.cdiv(n, block),), x, n, BLOCK=block)
    assert [(r.kind, r.elements) for r in traffic.races] == [("write-after-read", 7)]
    assert traffic.races[0].example == ((0, 0, 0), (1, 0, 0), 128)
    assert "stored element 128 of `x_ptr`" in traffic.races[0].describe()
    assert torch.equal(x, torch.cat([torch.arange(1.0, n), torch.zeros(1)]))


def test_an_instance_rewriting_its_own_block_and_a_lock_are_not_races():
    x = torch.randn(4 * 32)
    out = torch.empty(4 * 32)
    assert tc.run_counted(rewrite_own_block, (4,), x, out, BLOCK=32).race_free
    torch.testing.assert_close(out, 2 * x)
    out, lock = torch.zeros(32), torch.zeros(1, dtype=torch.int32)
    traffic = tc.run_counted(accumulate_under_lock, (4,), x, out, lock, BLOCK=32)
    assert traffic.race_free
    torch.testing.assert_close(out, x.reshape(4, 32).sum(0))


@pytest.mark.parametrize(
    "name, spec",
    [
        ("bias_gelu", (37, 300, 0)),  # 2-D tiles, a (3, 3) grid
        ("softmax_rows", (6, 100, 128, 0.0, 0)),  # a program per row
        ("matmul", (40, 50, 36, "float32", "nn", 2)),  # tiles, a (2, 2) grid
        ("attention_forward", (100, 80, 16, 0)),  # 4 query blocks reading all of K and V
    ],
)
def test_the_reference_kernels_of_12_have_no_race(name, spec):
    from grader.checks import ch12_triton as checks

    from .helpers import reference_fn

    args = checks.make_inputs(name, spec)
    with tc.count_traffic() as log:
        reference_fn("12_triton", name)(*args)
    total = log.total()
    assert total.race_free, [r.describe() for r in total.races]
    assert max(x * y * z for _, (x, y, z) in total.launches) > 1
