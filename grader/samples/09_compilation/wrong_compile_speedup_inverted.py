"""compile_speedup returns compiled time over eager time: the inverse of a speed-up."""

# fails: test_compile_speedup, test_compile_speedup_cuda
# %% compile_speedup
import statistics
import time

import torch


def compile_speedup(fn, *args) -> float:
    def median_ms(f):
        for _ in range(5):
            f(*args)
        times = []
        for _ in range(30):
            start = time.perf_counter()
            f(*args)
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)

    return median_ms(torch.compile(fn)) / median_ms(fn)
