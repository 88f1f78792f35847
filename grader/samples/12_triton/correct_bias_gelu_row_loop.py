"""A correct bias_gelu written differently: one program instance per row, looping over the row in
blocks of 512 columns (the bias is read once per row: M*N*4 bytes at most)."""

# %% bias_gelu
import torch
import triton
import triton.language as tl


@triton.jit
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        h = tl.load(x_ptr + row * N + cols, mask=mask) + tl.load(bias_ptr + cols, mask=mask)
        y = h * tl.sigmoid(1.5957691216057308 * (h + 0.044715 * h * h * h))
        tl.store(out_ptr + row * N + cols, y, mask=mask)


def bias_gelu(x, bias):
    out = torch.empty_like(x)
    if out.numel():
        bias_gelu_kernel[(x.shape[0],)](x, bias, out, x.shape[1], BLOCK=512)
    return out
