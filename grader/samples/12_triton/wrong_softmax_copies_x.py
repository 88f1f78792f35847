"""softmax_rows makes x contiguous before its kernel: right values, but x.contiguous() copies a
strided x (one more read and write of all of it), which the exercise rules out."""

# fails: test_softmax_rows
# %% softmax_rows
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * N + cols, e / tl.sum(e, axis=0), mask=mask)


def softmax_rows(x):
    x = x.contiguous()
    M, N = x.shape
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M:
        softmax_kernel[(M,)](x, out, N, BLOCK=triton.next_power_of_2(N))
    return out
