"""matmul_tflops returns GFLOP/s (divides by 1e9) instead of TFLOP/s."""

# fails: test_matmul_tflops, test_matmul_tflops_cuda
# %% matmul_tflops
import statistics
import time

import torch


def matmul_tflops(n, dtype):
    cuda = torch.cuda.is_available()
    a = torch.randn(n, n, device="cuda" if cuda else "cpu", dtype=dtype)
    b = torch.randn(n, n, device="cuda" if cuda else "cpu", dtype=dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e9
