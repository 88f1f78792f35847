"""matmul_tflops times one matmul, the first: no warm-up, so the one-time cost of the first
matmul of a shape (cuBLAS set-up, kernel selection) is in the figure."""

# fails: test_matmul_tflops
# may-fail-on-gpu: test_matmul_tflops_cuda
# %% matmul_tflops
import time

import torch


def matmul_tflops(n, dtype):
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    a @ b
    if cuda:
        torch.cuda.synchronize()
    return 2 * n**3 / (time.perf_counter() - t0) / 1e12
