"""matmul_tflops is right on a GPU (CUDA events), but its CPU path starts the clock once and
appends the time since then after every call: the later samples hold the total of all the calls
so far, so the median is about five calls' time and the figure about a fifth of the CPU's."""

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
    seconds = []
    t0 = time.perf_counter()
    for _ in range(10):
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            seconds.append(start.elapsed_time(end) / 1000)
        else:
            a @ b
            seconds.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(seconds) / 1e12
