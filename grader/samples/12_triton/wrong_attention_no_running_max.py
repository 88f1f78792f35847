"""attention_forward without the running max: it sums exp(score) over the key blocks and divides
at the end. Exact in exact arithmetic, and right while the scores stay small, but a query whose
scores reach about 88 (float32) overflows exp to inf and gives nan: not the stable online
softmax the exercise asks for."""

# fails: test_attention_forward
# %% attention_forward
import math

import torch
import triton
import triton.language as tl


@triton.jit
def attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    L,
    S,
    sq,
    sk,
    sv,
    so,
    scale,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    row_ok = rows < L
    q = tl.load(q_ptr + rows[:, None] * sq + dims[None, :], mask=row_ok[:, None], other=0.0)
    q = q * (scale * 1.4426950408889634)  # scores in base 2
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, S, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < S
        k = tl.load(k_ptr + cols[:, None] * sk + dims[None, :], mask=col_ok[:, None], other=0.0)
        s = tl.where(col_ok[None, :], tl.dot(q, tl.trans(k)), -float("inf"))
        p = tl.exp2(s)
        l_i = l_i + tl.sum(p, axis=1)
        v = tl.load(v_ptr + cols[:, None] * sv + dims[None, :], mask=col_ok[:, None], other=0.0)
        acc = acc + tl.dot(p, v)
    tl.store(o_ptr + rows[:, None] * so + dims[None, :], acc / l_i[:, None], mask=row_ok[:, None])


def attention_forward(q, k, v):
    L, d = q.shape
    S = k.shape[0]
    out = torch.empty((L, d), dtype=q.dtype, device=q.device)
    attention_kernel[(triton.cdiv(L, 16),)](
        q,
        k,
        v,
        out,
        L,
        S,
        q.stride(0),
        k.stride(0),
        v.stride(0),
        out.stride(0),
        1.0 / math.sqrt(d),
        D=d,
        BLOCK_M=16,
        BLOCK_N=64,
    )
    return out
