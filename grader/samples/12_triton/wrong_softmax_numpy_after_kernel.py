"""softmax_rows launches a kernel that reads each row once and stores it unchanged, then writes
the softmax into the output through a numpy view of it (no torch operation on the output): the
counted bytes are a softmax kernel's, the values are numpy's."""

# fails: test_softmax_rows
# may-fail-on-gpu: test_softmax_rows_cuda
# %% softmax_rows
import numpy as np
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
        copy_rows_kernel[(M,)](x, out, N, x.stride(0), BLOCK=triton.next_power_of_2(N))
        if out.device.type == "cpu":
            r = out.numpy().astype(np.float64)
            r = np.exp(r - r.max(axis=1, keepdims=True))
            out.numpy()[:] = r / r.sum(axis=1, keepdims=True)
        else:
            out.copy_(torch.softmax(x, dim=1))
    return out
