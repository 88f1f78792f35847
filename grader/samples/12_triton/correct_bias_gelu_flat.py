"""A correct bias_gelu written differently: a flat 1-D kernel over the M*N elements that loads
bias[offsets % N] for every element (M*N*4 bytes of bias, the most the exercise allows) and
writes tanh with exp."""

# %% bias_gelu
import torch
import triton
import triton.language as tl


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    h = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % N, mask=mask)
    u = 0.7978845608028654 * (h + 0.044715 * h * h * h)
    tanh_u = 2.0 / (1.0 + tl.exp(-2.0 * u)) - 1.0
    tl.store(out_ptr + offsets, 0.5 * h * (1.0 + tanh_u), mask=mask)


def bias_gelu(x, bias):
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        bias_gelu_kernel[(triton.cdiv(n, 1024),)](x, bias, out, n, x.shape[1], BLOCK=1024)
    return out
