"""A correct matmul_tflops written differently: perf_counter imported by name, synchronize around
each of 15 repeats, statistics.median."""

# %% matmul_tflops
from statistics import median
from time import perf_counter

import torch


def matmul_tflops(n: int, dtype: torch.dtype) -> float:
    gpu = torch.cuda.is_available()
    a, b = (torch.randn(n, n, dtype=dtype, device="cuda" if gpu else "cpu") for _ in "ab")
    for _ in range(5):
        torch.matmul(a, b)
    times = []
    for _ in range(15):
        if gpu:
            torch.cuda.synchronize()
        start = perf_counter()
        torch.matmul(a, b)
        if gpu:
            torch.cuda.synchronize()
        times.append(perf_counter() - start)
    return float(2 * n**3 / median(times) / 1e12)
