"""attention_forward loads v's last block with a mask but no `other`: the masked-off rows are
undefined on a GPU (tl.load's docstring), and tl.dot(p, v) multiplies them by the zero
probabilities of the keys past S, so anything that is not a finite number there (NaN, inf)
spoils whole output rows. The checks fill such lanes with NaN; the interpreter alone gives 0."""

# fails: test_attention_forward
# %% attention_forward
import math

import torch
import triton
import triton.language as tl


@triton.jit
def attention_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, L, S, stride_q, stride_k, stride_v, stride_o, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # One program instance per BLOCK_M query rows; a loop over the keys, BLOCK_N at a time.
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    row_ok = rows < L
    q = tl.load(q_ptr + rows[:, None] * stride_q + dims[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)  # running max of each row's scores
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros((BLOCK_M, D), tl.float32)  # running sum of exp(score - m_i) * v
    for start in range(0, S, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < S
        k = tl.load(
            k_ptr + cols[:, None] * stride_k + dims[None, :], mask=col_ok[:, None], other=0.0
        )
        s = tl.dot(q, tl.trans(k)) * scale  # (BLOCK_M, BLOCK_N): this block's scores only
        s = tl.where(col_ok[None, :], s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)  # rescales what was summed under the old max
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + cols[:, None] * stride_v + dims[None, :], mask=col_ok[:, None])
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + rows[:, None] * stride_o + dims[None, :], out, mask=row_ok[:, None])


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v for one head, online softmax over blocks of keys.

    Args:
        q: (L, d) float32; k, v: (S, d) float32; d a power of two, 16 <= d <= 128;
            L, S >= 1; the last dimension contiguous (stride 1).

    Returns:
        (L, d) float32, F.scaled_dot_product_attention(q, k, v).
    """
    L, d = q.shape
    S = k.shape[0]
    out = torch.empty((L, d), dtype=q.dtype, device=q.device)
    BLOCK_M, BLOCK_N = 32, 32
    attention_kernel[(triton.cdiv(L, BLOCK_M),)](
        q, k, v, out, L, S, q.stride(0), k.stride(0), v.stride(0), out.stride(0),
        1.0 / math.sqrt(d), D=d, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )  # fmt: skip
    return out
