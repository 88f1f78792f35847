"""The forward keeps Exercise 4's kernel and stores no log-sum-exp (lse is an unwritten
placeholder); the backward recomputes each query block's max and sum of exp with a first pass
over every key, in both kernels: the key-block kernel reads all of k once per block of queries
per program, and lse is never read."""

# fails: test_attention_backward, test_flash_attention
# may-fail-on-gpu: test_attention_backward_cuda
# %% attention_backward
import math

import torch
import triton
import triton.language as tl


@triton.jit
def attention_lse_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, L, S, stride_q, stride_k, stride_v, stride_o, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
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
        s = tl.where(col_ok[None, :], tl.dot(q, tl.trans(k)) * scale, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_ptr + cols[:, None] * stride_v + dims[None, :], mask=col_ok[:, None], other=0.0
        )
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    tl.store(
        o_ptr + rows[:, None] * stride_o + dims[None, :], acc / l_i[:, None], mask=row_ok[:, None]
    )


@triton.jit
def row_stats(q, k_ptr, stride_k, dims, row_ok, S, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr):  # fmt: skip
    # a first pass over every key: the max and the log of the sum of exp, per query
    m_i = tl.full((BLOCK_M,), -float("inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    for start in range(0, S, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < S
        k = tl.load(
            k_ptr + cols[:, None] * stride_k + dims[None, :], mask=col_ok[:, None], other=0.0
        )
        s = tl.where(col_ok[None, :], tl.dot(q, tl.trans(k)) * scale, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(s - m_new[:, None]), axis=1)
        m_i = m_new
    return tl.where(row_ok, m_i + tl.log(l_i), 0.0)


@triton.jit
def attention_delta_kernel(o_ptr, do_ptr, delta_ptr, L, stride_o, stride_do, D: tl.constexpr,
                           BLOCK_M: tl.constexpr):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    mask = (rows < L)[:, None]
    o = tl.load(o_ptr + rows[:, None] * stride_o + dims[None, :], mask=mask, other=0.0)
    do = tl.load(do_ptr + rows[:, None] * stride_do + dims[None, :], mask=mask, other=0.0)
    tl.store(delta_ptr + rows, tl.sum(o * do, axis=1), mask=rows < L)


@triton.jit
def attention_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, delta_ptr, dk_ptr, dv_ptr, L, S,
    stride_q, stride_k, stride_v, stride_do, stride_dk, stride_dv, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
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
        lse = row_stats(q, k_ptr, stride_k, dims, row_ok, S, scale, D, BLOCK_M, BLOCK_N)
        delta = tl.load(delta_ptr + rows, mask=row_ok, other=0.0)
        s = tl.where(
            row_ok[:, None] & col_ok[None, :], tl.dot(q, tl.trans(k)) * scale, -float("inf")
        )
        p = tl.exp(s - lse[:, None])
        dv += tl.dot(tl.trans(p), do)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dk += tl.dot(tl.trans(ds), q)
    tl.store(dk_ptr + cols[:, None] * stride_dk + dims[None, :], dk * scale, mask=col_ok[:, None])
    tl.store(dv_ptr + cols[:, None] * stride_dv + dims[None, :], dv, mask=col_ok[:, None])


@triton.jit
def attention_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, delta_ptr, dq_ptr, L, S,
    stride_q, stride_k, stride_v, stride_do, stride_dq, scale,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    row_ok = rows < L
    q = tl.load(q_ptr + rows[:, None] * stride_q + dims[None, :], mask=row_ok[:, None], other=0.0)
    do = tl.load(
        do_ptr + rows[:, None] * stride_do + dims[None, :], mask=row_ok[:, None], other=0.0
    )
    lse = row_stats(q, k_ptr, stride_k, dims, row_ok, S, scale, D, BLOCK_M, BLOCK_N)
    delta = tl.load(delta_ptr + rows, mask=row_ok, other=0.0)
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
        s = tl.where(
            row_ok[:, None] & col_ok[None, :], tl.dot(q, tl.trans(k)) * scale, -float("inf")
        )
        p = tl.exp(s - lse[:, None])
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dq += tl.dot(ds, k)
    tl.store(dq_ptr + rows[:, None] * stride_dq + dims[None, :], dq * scale, mask=row_ok[:, None])


def attention_forward_lse(q, k, v):
    L, d = q.shape
    S = k.shape[0]
    o = torch.empty((L, d), dtype=torch.float32, device=q.device)
    lse = torch.empty((L,), dtype=torch.float32, device=q.device)  # the backward recomputes it
    attention_lse_kernel[(triton.cdiv(L, 32),)](
        q, k, v, o, L, S, q.stride(0), k.stride(0), v.stride(0), o.stride(0), 1.0 / math.sqrt(d),
        D=d, BLOCK_M=32, BLOCK_N=32,
    )  # fmt: skip
    return o, lse


def attention_backward(q, k, v, o, lse, do):
    L, d = q.shape
    S = k.shape[0]
    scale = 1.0 / math.sqrt(d)
    dq = torch.empty((L, d), dtype=torch.float32, device=q.device)
    dk = torch.empty((S, d), dtype=torch.float32, device=q.device)
    dv = torch.empty((S, d), dtype=torch.float32, device=q.device)
    delta = torch.empty((L,), dtype=torch.float32, device=q.device)
    attention_delta_kernel[(triton.cdiv(L, 32),)](
        o, do, delta, L, o.stride(0), do.stride(0), D=d, BLOCK_M=32
    )
    attention_dkdv_kernel[(triton.cdiv(S, 32),)](
        q, k, v, do, delta, dk, dv, L, S, q.stride(0), k.stride(0), v.stride(0), do.stride(0),
        dk.stride(0), dv.stride(0), scale, D=d, BLOCK_M=32, BLOCK_N=32,
    )  # fmt: skip
    attention_dq_kernel[(triton.cdiv(L, 32),)](
        q, k, v, do, delta, dq, L, S, q.stride(0), k.stride(0), v.stride(0), do.stride(0),
        dq.stride(0), scale, D=d, BLOCK_M=32, BLOCK_N=32,
    )  # fmt: skip
    return dq, dk, dv
