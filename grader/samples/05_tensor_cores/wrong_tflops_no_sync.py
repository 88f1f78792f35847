"""matmul_tflops stops the clock right after the launch, without synchronizing."""

# fails: test_matmul_tflops, test_matmul_tflops_cuda
# %% matmul_tflops
import statistics
import time

import torch


def matmul_tflops(n, dtype):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e12
