"""A correct bias_gelu written differently: tanh from CUDA's libdevice (libdevice.tanh), which
the course runs under the interpreter too, and a flat 1-D grid of 512-element blocks."""

# %% bias_gelu
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    h = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % N, mask=mask)
    u = 0.7978845608028654 * (h + 0.044715 * h * h * h)
    tl.store(out_ptr + offsets, 0.5 * h * (1.0 + libdevice.tanh(u)), mask=mask)


def bias_gelu(x, bias):
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        bias_gelu_kernel[(triton.cdiv(n, 512),)](x, bias, out, n, x.shape[1], BLOCK=512)
    return out
