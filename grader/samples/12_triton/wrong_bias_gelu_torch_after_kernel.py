"""bias_gelu launches a kernel that loads x and the bias once and stores x + bias, then fills the
output with torch (out.copy_(F.gelu(x + bias))): the loads, stores and launch count are those of
a fused kernel, but torch does the work, with two more passes over memory."""

# fails: test_bias_gelu
# may-fail-on-gpu: test_bias_gelu_cuda
# %% bias_gelu
import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, bias_ptr, out_ptr, n, N, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    b = tl.load(bias_ptr + offsets % N, mask=mask)
    tl.store(out_ptr + offsets, x + b, mask=mask)


def bias_gelu(x, bias):
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        add_kernel[(triton.cdiv(n, 1024),)](x, bias, out, n, x.shape[1], BLOCK=1024)
        out.copy_(F.gelu(x + bias, approximate="tanh"))
    return out
