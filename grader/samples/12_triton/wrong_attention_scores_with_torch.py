"""attention_forward computes the scores q @ k.T with torch (an L x S matrix in memory) and only
the softmax and the product with v in Triton: the score matrix FlashAttention never writes."""

# fails: test_attention_forward
# may-fail-on-gpu: test_attention_forward_cuda
# %% attention_forward
import math

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_v_kernel(s_ptr, v_ptr, o_ptr, S, ss, sv, so, D: tl.constexpr, BLOCK_S: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_S)
    dims = tl.arange(0, D)
    s = tl.load(s_ptr + row * ss + cols, mask=cols < S, other=-float("inf"))
    p = tl.exp(s - tl.max(s, axis=0))
    p = p / tl.sum(p, axis=0)
    v = tl.load(v_ptr + cols[:, None] * sv + dims[None, :], mask=(cols < S)[:, None], other=0.0)
    tl.store(o_ptr + row * so + dims, tl.sum(p[:, None] * v, axis=0))


def attention_forward(q, k, v):
    L, d = q.shape
    S = k.shape[0]
    scores = (q @ k.t()) / math.sqrt(d)
    out = torch.empty((L, d), dtype=q.dtype, device=q.device)
    softmax_v_kernel[(L,)](
        scores,
        v,
        out,
        S,
        scores.stride(0),
        v.stride(0),
        out.stride(0),
        D=d,
        BLOCK_S=triton.next_power_of_2(S),
    )
    return out
