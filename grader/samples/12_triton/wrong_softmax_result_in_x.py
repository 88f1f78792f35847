"""softmax_rows computes the softmax with torch into x itself, launches a kernel that copies x
into the output, then puts x back: x read once by one kernel, only the output stored, right
values, but torch did the work (and wrote into its caller's input)."""

# fails: test_softmax_rows
# may-fail-on-gpu: test_softmax_rows_cuda
# %% softmax_rows
import torch
import triton
import triton.language as tl


@triton.jit
def copy_rows_kernel(x_ptr, out_ptr, N, x_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    v = tl.load(x_ptr + row * x_row_stride + cols, mask=mask)
    tl.store(out_ptr + row * N + cols, v, mask=mask)


def softmax_rows(x):
    M, N = x.shape
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M:
        saved = x.clone()
        x.copy_(torch.softmax(x, dim=1))
        copy_rows_kernel[(M,)](x, out, N, x.stride(0), BLOCK=triton.next_power_of_2(N))
        x.copy_(saved)
    return out
