"""bias_gelu runs two kernels: one writes h = x + bias to a temporary tensor, the second reads it
back and applies GELU. Right values, but twice the memory traffic of one fused kernel."""

# fails: test_bias_gelu
# may-fail-on-gpu: test_bias_gelu_cuda
# %% bias_gelu
import torch
import triton
import triton.language as tl


@triton.jit
def add_bias_kernel(x_ptr, bias_ptr, h_ptr, n, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    h = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % N, mask=mask)
    tl.store(h_ptr + offsets, h, mask=mask)


@triton.jit
def gelu_kernel(h_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    h = tl.load(h_ptr + offsets, mask=mask)
    y = h * tl.sigmoid(1.5957691216057308 * (h + 0.044715 * h * h * h))
    tl.store(out_ptr + offsets, y, mask=mask)


def bias_gelu(x, bias):
    n = x.numel()
    h, out = torch.empty_like(x), torch.empty_like(x)
    if n == 0:
        return out
    grid = (triton.cdiv(n, 1024),)
    add_bias_kernel[grid](x, bias, h, n, x.shape[1], BLOCK=1024)
    gelu_kernel[grid](h, out, n, BLOCK=1024)
    return out
