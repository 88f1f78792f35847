"""matmul's kernel places its tile's columns with BLOCK_M instead of BLOCK_N: right with the
interpreter's square 32 x 32 config, wrong with the GPU configs whose tiles are not square
(128 x 256, 64 x 128), which the checks now run through the interpreter too."""

# fails: test_matmul, test_matmul_cuda
# %% matmul
import torch
import triton
import triton.language as tl

from grader.runtime import triton_cpu

#: Whether kernels are compiled for a GPU here (not interpreted).
GPU_COMPILES = torch.cuda.is_available() and not triton_cpu.interpreter_on()


def matmul_configs(gpu: bool = GPU_COMPILES) -> list:
    """The autotuner's configs: for a GPU (gpu=True), several, which the autotuner times on the
    first call for a new (M, N, K), keeping the fastest; for the interpreter (gpu=False), one:
    it has no GPU clock to time configs with ("0 active drivers"). The checks run each of your
    GPU configs through the interpreter too (block sizes as given), and compile it for sm_90
    and sm_80."""
    if gpu:
        return [
            triton.Config(
                {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_warps=8, num_stages=3
            ),
            triton.Config(
                {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=4, num_stages=4
            ),
            triton.Config(
                {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=4, num_stages=4
            ),
            triton.Config(
                {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64}, num_warps=4, num_stages=4
            ),
        ]
    return [triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32})]


@triton.autotune(configs=matmul_configs(), key=["M", "N", "K"])
@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    # One program instance per (BLOCK_M x BLOCK_N) tile of c. DOT_PRECISION is tl.dot's
    # input_precision: "tf32x3" for float32 inputs (float32 accuracy on Tensor Cores), "tf32"
    # (the default, which float16 inputs ignore) otherwise.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_M + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32 accumulator, also for fp16
    for k in range(0, K, BLOCK_K):
        ks = k + rk
        a = tl.load(
            a_ptr + rm[:, None] * stride_am + ks[None, :] * stride_ak,
            mask=(rm[:, None] < M) & (ks[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + ks[:, None] * stride_bk + rn[None, :] * stride_bn,
            mask=(ks[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        )
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)  # acc += a @ b, in fp32
    c = acc.to(c_ptr.dtype.element_ty)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, c, mask=mask)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with a tiled, autotuned Triton kernel (tl.dot, fp32 accumulator).

    Args:
        a: (M, K), b: (K, N), both float16 or both float32, any strides (a transposed view or
            a column slice included); 1 <= M, N; 1 <= K <= 4096.

    Returns:
        (M, N) in the inputs' dtype, contiguous; float32 to float32 accuracy on a GPU too
        (tl.dot with input_precision "tf32x3" or "ieee", not the default TF32).
    """
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if c.numel() == 0:
        return c.zero_()
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))  # noqa: E731
    precision = "tf32x3" if a.dtype == torch.float32 else "tf32"
    matmul_kernel[grid](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        c.stride(0), c.stride(1), DOT_PRECISION=precision,
    )  # fmt: skip
    return c
