"""attention_backward leaves D out: dS = P * dP instead of P * (dP - D), with
D_i = rowsum(dO_i * O_i); dv is right, dq and dk are not (and o is never read)."""

# fails: test_attention_backward, test_attention_backward_cuda, test_flash_attention
# %% attention_backward
import math

import torch
import triton
import triton.language as tl


@triton.jit
def attention_lse_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, L, S, stride_q, stride_k, stride_v, stride_o, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # Exercise 4's kernel; it also stores each row's log-sum-exp, lse = m + log(l), in lse_ptr.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    row_ok = rows < L
    q = tl.load(q_ptr + rows[:, None] * stride_q + dims[None, :], mask=row_ok[:, None], other=0.0)
    m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, S, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < S
        k = tl.load(
            k_ptr + cols[:, None] * stride_k + dims[None, :], mask=col_ok[:, None], other=0.0
        )
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(col_ok[None, :], s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_ptr + cols[:, None] * stride_v + dims[None, :], mask=col_ok[:, None], other=0.0
        )
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + rows[:, None] * stride_o + dims[None, :], out, mask=row_ok[:, None])
    tl.store(lse_ptr + rows, m_i + tl.log(l_i), mask=row_ok)  # all the backward needs of P


@triton.jit
def attention_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, dk_ptr, dv_ptr, L, S,
    stride_q, stride_k, stride_v, stride_do, stride_dk, stride_dv, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # One program instance per BLOCK_N keys: their dk and dv, a loop over the queries,
    # BLOCK_M at a time, recomputing P = exp(s - lse) block by block.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    col_ok = cols < S
    k = tl.load(k_ptr + cols[:, None] * stride_k + dims[None, :], mask=col_ok[:, None], other=0.0)
    v = tl.load(v_ptr + cols[:, None] * stride_v + dims[None, :], mask=col_ok[:, None], other=0.0)
    dk = tl.zeros((BLOCK_N, D), tl.float32)
    dv = tl.zeros((BLOCK_N, D), tl.float32)
    for start in range(0, L, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        row_ok = rows < L
        q = tl.load(
            q_ptr + rows[:, None] * stride_q + dims[None, :], mask=row_ok[:, None], other=0.0
        )
        do = tl.load(
            do_ptr + rows[:, None] * stride_do + dims[None, :], mask=row_ok[:, None], other=0.0
        )
        lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale  # (BLOCK_M, BLOCK_N)
        s = tl.where(row_ok[:, None] & col_ok[None, :], s, -float("inf"))
        p = tl.exp(s - lse[:, None])  # the probabilities, recomputed; 0 outside L x S
        dv += tl.dot(tl.trans(p), do)
        dp = tl.dot(do, tl.trans(v))
        ds = p * dp  # D left out
        dk += tl.dot(tl.trans(ds), q)
    tl.store(dk_ptr + cols[:, None] * stride_dk + dims[None, :], dk * scale, mask=col_ok[:, None])
    tl.store(dv_ptr + cols[:, None] * stride_dv + dims[None, :], dv, mask=col_ok[:, None])


@triton.jit
def attention_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, dq_ptr, L, S,
    stride_q, stride_k, stride_v, stride_do, stride_dq, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    # One program instance per BLOCK_M queries: their dq, a loop over the keys, BLOCK_N at a
    # time (or: no such kernel, and dq accumulated with tl.atomic_add in the kernel above).
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    row_ok = rows < L
    q = tl.load(q_ptr + rows[:, None] * stride_q + dims[None, :], mask=row_ok[:, None], other=0.0)
    do = tl.load(
        do_ptr + rows[:, None] * stride_do + dims[None, :], mask=row_ok[:, None], other=0.0
    )
    lse = tl.load(lse_ptr + rows, mask=row_ok, other=0.0)
    dq = tl.zeros((BLOCK_M, D), tl.float32)
    for start in range(0, S, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < S
        k = tl.load(
            k_ptr + cols[:, None] * stride_k + dims[None, :], mask=col_ok[:, None], other=0.0
        )
        v = tl.load(
            v_ptr + cols[:, None] * stride_v + dims[None, :], mask=col_ok[:, None], other=0.0
        )
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(row_ok[:, None] & col_ok[None, :], s, -float("inf"))
        p = tl.exp(s - lse[:, None])
        dp = tl.dot(do, tl.trans(v))
        ds = p * dp  # D left out
        dq += tl.dot(ds, k)
    tl.store(dq_ptr + rows[:, None] * stride_dq + dims[None, :], dq * scale, mask=row_ok[:, None])


def attention_forward_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
    """Exercise 4's attention forward, also returning each row's log-sum-exp.

    Args:
        q: (L, d) float32; k, v: (S, d) float32; d a power of two, 16 <= d <= 128;
            L, S >= 1; the last dimension contiguous (rows may be strided).

    Returns:
        ``(o, lse)``: o (L, d) float32, ``F.scaled_dot_product_attention(q, k, v)``; lse (L,)
        float32, ``torch.logsumexp(q @ k.T / sqrt(d), dim=1)``; both new and contiguous.
    """
    L, d = q.shape
    S = k.shape[0]
    o = torch.empty((L, d), dtype=torch.float32, device=q.device)
    lse = torch.empty((L,), dtype=torch.float32, device=q.device)
    BLOCK_M, BLOCK_N = 32, 32
    attention_lse_kernel[(triton.cdiv(L, BLOCK_M),)](
        q, k, v, o, lse, L, S, q.stride(0), k.stride(0), v.stride(0), o.stride(0),
        1.0 / math.sqrt(d), D=d, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )  # fmt: skip
    return o, lse


def attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    do: torch.Tensor,
) -> tuple:
    """The gradients of softmax(q k^T / sqrt(d)) v, FlashAttention-2's way: P recomputed from
    lse block by block, never stored.

    Args:
        q, o, do: (L, d) float32; k, v: (S, d) float32; the last dimension contiguous, each
            with its own row stride; lse: (L,) float32, contiguous, from attention_forward_lse.

    Returns:
        ``(dq, dk, dv)``: new contiguous float32 tensors of the shapes of q, k and v.
    """
    L, d = q.shape
    S = k.shape[0]
    scale = 1.0 / math.sqrt(d)
    dq = torch.empty((L, d), dtype=torch.float32, device=q.device)
    dk = torch.empty((S, d), dtype=torch.float32, device=q.device)
    dv = torch.empty((S, d), dtype=torch.float32, device=q.device)
    BLOCK_M, BLOCK_N = 32, 32
    attention_dkdv_kernel[(triton.cdiv(S, BLOCK_N),)](
        q, k, v, do, lse, dk, dv, L, S, q.stride(0), k.stride(0), v.stride(0),
        do.stride(0), dk.stride(0), dv.stride(0), scale, D=d, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )  # fmt: skip
    attention_dq_kernel[(triton.cdiv(L, BLOCK_M),)](
        q, k, v, do, lse, dq, L, S, q.stride(0), k.stride(0), v.stride(0), do.stride(0),
        dq.stride(0), scale, D=d, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
    )  # fmt: skip
    return dq, dk, dv
