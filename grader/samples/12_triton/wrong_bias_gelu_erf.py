"""bias_gelu computes GELU's exact (erf) form, F.gelu's default, not the tanh approximation the
exercise asks for: up to about 1e-3 off."""

# fails: test_bias_gelu, test_bias_gelu_cuda
# %% bias_gelu
import torch
import triton
import triton.language as tl


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    h = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % N, mask=mask)
    tl.store(out_ptr + offsets, 0.5 * h * (1.0 + tl.erf(h * 0.7071067811865476)), mask=mask)


def bias_gelu(x, bias):
    out = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return out
    bias_gelu_kernel[(triton.cdiv(n, 1024),)](x, bias, out, n, x.shape[1], BLOCK=1024)
    return out
