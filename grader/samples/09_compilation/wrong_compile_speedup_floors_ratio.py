"""compile_speedup times both sides correctly but floors the ratio (3.8x becomes 3.0x): a
speed-up is a real number."""

# fails: test_compile_speedup
# %% compile_speedup
import statistics
import time

import torch


def compile_speedup(fn, *args) -> float:
    cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)

    def median_ms(f, warmup=5, repeat=50):
        for _ in range(warmup):
            f(*args)
        times = []
        for _ in range(repeat):
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            f(*args)
            if cuda:
                torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)

    compiled = torch.compile(fn)
    return float(median_ms(fn) // median_ms(compiled))
