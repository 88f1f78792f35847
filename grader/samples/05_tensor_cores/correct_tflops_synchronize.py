"""A correct matmul_tflops written differently: torch.mm, synchronize around perf_counter, sorted middle."""

# %% matmul_tflops
import time

import torch


def matmul_tflops(n: int, dtype: torch.dtype) -> float:
    on_gpu = torch.cuda.is_available()
    dev = torch.device("cuda", 0) if on_gpu else torch.device("cpu")
    x, y = (torch.randn(n, n, dtype=dtype, device=dev) for _ in range(2))

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    for _ in range(2):
        torch.mm(x, y)
    samples = []
    for _ in range(9):
        sync()
        t = time.perf_counter()
        torch.mm(x, y)
        sync()
        samples.append(time.perf_counter() - t)
    return float(2 * n**3 / sorted(samples)[len(samples) // 2] / 1e12)
