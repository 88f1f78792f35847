"""bias_gelu launches M*N // BLOCK program instances: the last, partial block of elements is never
computed (its mask is right, but no instance owns it)."""

# fails: test_bias_gelu
# %% bias_gelu
import torch
import triton
import triton.language as tl


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    h = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % N, mask=mask)
    y = h * tl.sigmoid(1.5957691216057308 * (h + 0.044715 * h * h * h))
    tl.store(out_ptr + offsets, y, mask=mask)


def bias_gelu(x, bias):
    out = torch.empty_like(x)
    n = x.numel()
    if n == 0:
        return out
    bias_gelu_kernel[(max(n // 256, 1),)](x, bias, out, n, x.shape[1], BLOCK=256)
    return out
