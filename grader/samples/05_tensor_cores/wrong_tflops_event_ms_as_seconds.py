"""matmul_tflops divides by Event.elapsed_time() as if it were seconds: it is milliseconds, so
the result is 1000 times too small."""

# fails: test_matmul_tflops, test_matmul_tflops_cuda
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
    times = []
    for _ in range(10):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            a @ b
            times.append((time.perf_counter() - t0) * 1000)
    return 2 * n**3 / statistics.median(times) / 1e12
