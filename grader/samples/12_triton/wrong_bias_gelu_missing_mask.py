"""bias_gelu's kernel loads and stores without a mask: the last block of a row (N not a multiple
of BLOCK_N) reaches past the end of x, bias and the output."""

# fails: test_bias_gelu
# %% bias_gelu
import torch
import triton
import triton.language as tl


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, M, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * N + cols)
    h = x + tl.load(bias_ptr + cols)
    y = h * tl.sigmoid(1.5957691216057308 * (h + 0.044715 * h * h * h))
    tl.store(out_ptr + row * N + cols, y)


def bias_gelu(x, bias):
    M, N = x.shape
    out = torch.empty_like(x)
    if out.numel() == 0:
        return out
    bias_gelu_kernel[(M, triton.cdiv(N, 128))](x, bias, out, M, N, BLOCK_N=128)
    return out
