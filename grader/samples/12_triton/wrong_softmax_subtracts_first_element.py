"""softmax_rows subtracts each row's first element instead of its max before exp: exact in
exact arithmetic and fine for rows near ±1e4 whose values lie close together, but a row spread
over hundreds still has differences above 88, where exp overflows to inf (and inf/inf is nan)."""

# fails: test_softmax_rows
# %% softmax_rows
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, N, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))
    first = tl.sum(tl.where(cols == 0, x, 0.0), axis=0)
    e = tl.exp(x - first)
    tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)


def softmax_rows(x):
    M, N = x.shape
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M:
        BLOCK = triton.next_power_of_2(N)
        softmax_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), BLOCK=BLOCK)
    return out
