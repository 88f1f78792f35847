"""matmul_tflops is right on a GPU (CUDA events), but its CPU path times the ten calls together
and divides the flops of one by the total: the figure is a tenth of the CPU's."""

# fails-on-cpu: test_matmul_tflops
# %% matmul_tflops
import statistics
import time

import torch


def matmul_tflops(n, dtype):
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    if not cuda:
        t0 = time.perf_counter()
        for _ in range(10):
            a @ b
        return 2 * n**3 / (time.perf_counter() - t0) / 1e12
    seconds = []
    for _ in range(10):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1000)
    return 2 * n**3 / statistics.median(seconds) / 1e12
