"""bias_gelu writes tanh(u) as (exp(2u) - 1) / (exp(2u) + 1): right for small values, but exp(2u)
overflows float32 to inf once 2u passes about 88.7 (h above about 9.6, where 0.044715 h^3 is
large), and inf / inf is nan. tl.sigmoid, or tanh from exp(-2|u|), stays finite. On a GPU the
(8192, 8192) case of 2 x randn may or may not reach h = 9.6."""

# fails: test_bias_gelu
# may-fail-on-gpu: test_bias_gelu_cuda
# %% bias_gelu
import torch
import triton
import triton.language as tl


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    mask = (rows[:, None] < M) & col_ok[None, :]
    offsets = rows[:, None] * N + cols[None, :]
    h = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + cols, mask=col_ok)[None, :]
    e = tl.exp(2.0 * 0.7978845608028654 * (h + 0.044715 * h * h * h))
    tl.store(out_ptr + offsets, 0.5 * h * (1.0 + (e - 1.0) / (e + 1.0)), mask=mask)


def bias_gelu(x, bias):
    M, N = x.shape
    out = torch.empty_like(x)
    if out.numel():
        grid = (triton.cdiv(M, 16), triton.cdiv(N, 64))
        bias_gelu_kernel[grid](x, bias, out, M, N, BLOCK_M=16, BLOCK_N=64)
    return out
