"""A correct softmax_rows written differently: exp2 of the scores scaled by log2(e), as
FlashAttention's kernels do (exp2 is one instruction on a GPU), and a reciprocal of the sum."""

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
    e = tl.exp2((x - tl.max(x, axis=0)) * 1.4426950408889634)
    inv = 1.0 / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, e * inv, mask=mask)


def softmax_rows(x):
    M, N = x.shape
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M:
        softmax_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), BLOCK=triton.next_power_of_2(N))
    return out
