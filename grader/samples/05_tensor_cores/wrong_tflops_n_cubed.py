"""matmul_tflops counts n**3 flops instead of 2*n**3."""

# fails: test_matmul_tflops, test_matmul_tflops_cuda
# %% matmul_tflops
import statistics

import torch


def matmul_tflops(n, dtype):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return n**3 / statistics.median(times) / 1e12
