"""matmul_tflops divides by 2**40 instead of 10**12: a TFLOP is 10^12 floating-point operations,
not a binary tera."""

# fails: test_matmul_tflops
# %% matmul_tflops
import statistics

import torch


def matmul_tflops(n, dtype):
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    seconds = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        seconds.append(start.elapsed_time(end) / 1000)
    return 2 * n**3 / statistics.median(seconds) / 2**40
