"""attention_forward reads the keys twice (a first loop for each row's max and sum, a second for
the output) and launches twice the program instances it needs, the extra ones masking every
load off: k and v read twice per block of queries, hidden behind a bound counted per program
instance of the grid."""

# fails: test_attention_forward
# may-fail-on-gpu: test_attention_forward_cuda
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
    live = tl.program_id(0) < tl.cdiv(L, BLOCK_M)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    row_ok = rows < L
    q = tl.load(q_ptr + rows[:, None] * sq + dims[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    for start in range(0, S, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < S
        k = tl.load(
            k_ptr + cols[:, None] * sk + dims[None, :], mask=col_ok[:, None] & live, other=0.0
        )
        s = tl.where(col_ok[None, :], tl.dot(q, tl.trans(k)) * scale, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(s - m_new[:, None]), axis=1)
        m_i = m_new
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, S, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < S
        k = tl.load(
            k_ptr + cols[:, None] * sk + dims[None, :], mask=col_ok[:, None] & live, other=0.0
        )
        s = tl.where(col_ok[None, :], tl.dot(q, tl.trans(k)) * scale, -float("inf"))
        p = tl.exp(s - m_i[:, None]) / l_i[:, None]
        v = tl.load(
            v_ptr + cols[:, None] * sv + dims[None, :], mask=col_ok[:, None] & live, other=0.0
        )
        acc += tl.dot(p, v)
    tl.store(o_ptr + rows[:, None] * so + dims[None, :], acc, mask=row_ok[:, None])


def attention_forward(q, k, v):
    L, d = q.shape
    S = k.shape[0]
    out = torch.empty((L, d), dtype=q.dtype, device=q.device)
    attention_kernel[(2 * triton.cdiv(L, 32),)](
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
        BLOCK_M=32,
        BLOCK_N=32,
    )
    return out
