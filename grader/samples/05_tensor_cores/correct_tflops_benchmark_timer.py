"""A correct matmul_tflops written differently: torch.utils.benchmark.Timer.blocked_autorange
(its default timer synchronizes the GPU), as notebook 02 recommends."""

# %% matmul_tflops
import torch
from torch.utils import benchmark


def matmul_tflops(n: int, dtype: torch.dtype) -> float:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    timer = benchmark.Timer("torch.matmul(a, b)", globals={"a": a, "b": b})
    timer.timeit(3)  # warm-up
    measurement = timer.blocked_autorange(min_run_time=0.2)
    return 2 * n**3 / measurement.median / 1e12
