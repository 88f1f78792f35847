"""A correct matmul written differently: acc += tl.dot(a, b) and the K mask written as
k_remaining, blocks of 16 by 16 on the CPU, float32 products as three TF32 products
(input_precision="tf32x3", passed by the launcher)."""

# %% matmul
import torch
import triton
import triton.language as tl

from grader.runtime import triton_cpu


def matmul_configs(gpu=torch.cuda.is_available() and not triton_cpu.interpreter_on()):
    if gpu:
        return [
            triton.Config(
                {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=4, num_stages=4
            ),
            triton.Config(
                {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=4, num_stages=4
            ),
        ]
    return [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32})]


@triton.autotune(configs=matmul_configs(), key=["M", "N", "K"])
@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        ks = k + tl.arange(0, BLOCK_K)
        a = tl.load(
            a_ptr + rm[:, None] * sam + ks[None, :] * sak,
            mask=(rm[:, None] < M) & (tl.arange(0, BLOCK_K)[None, :] < K - k),
            other=0.0,
        )
        b = tl.load(
            b_ptr + ks[:, None] * sbk + rn[None, :] * sbn,
            mask=(rn[None, :] < N) & (tl.arange(0, BLOCK_K)[:, None] < K - k),
            other=0.0,
        )
        acc += tl.dot(a, b, input_precision=PRECISION)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(
        c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty), mask=mask
    )


def matmul(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))  # noqa: E731
    matmul_kernel[grid](
        a,
        b,
        c,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        PRECISION="tf32x3" if a.dtype == torch.float32 else "tf32",
    )
    return c
