"""softmax_rows exponentiates the scores as they are, without subtracting the row's max: exp
overflows to inf for values above about 88, and inf / inf is nan."""

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
    e = tl.exp(tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")))
    tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)


def softmax_rows(x):
    M, N = x.shape
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M:
        BLOCK = triton.next_power_of_2(N)
        softmax_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), BLOCK=BLOCK)
    return out
