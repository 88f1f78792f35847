"""softmax_rows loads each row twice: once to find its max, again to exponentiate it. Right
values, but 2 * M * N * 4 bytes read where M * N * 4 suffice."""

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
    ptrs = x_ptr + row * x_row_stride + cols
    row_max = tl.max(tl.load(ptrs, mask=mask, other=-float("inf")), axis=0)
    e = tl.exp(tl.load(ptrs, mask=mask, other=-float("inf")) - row_max)
    tl.store(out_ptr + row * out_row_stride + cols, e / tl.sum(e, axis=0), mask=mask)


def softmax_rows(x):
    M, N = x.shape
    out = torch.empty((M, N), dtype=x.dtype, device=x.device)
    if M:
        BLOCK = triton.next_power_of_2(N)
        softmax_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), BLOCK=BLOCK)
    return out
