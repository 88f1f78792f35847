"""compile_speedup times the compiled function from its first call, so the one-time compilation
is counted as if every call paid it (mean of 10 calls, no warm-up)."""

# fails: test_compile_speedup, test_compile_speedup_cuda
# %% compile_speedup
import time

import torch


def compile_speedup(fn, *args) -> float:
    def mean_ms(f, repeat=10):
        start = time.perf_counter()
        for _ in range(repeat):
            f(*args)
        return (time.perf_counter() - start) / repeat * 1000

    eager = mean_ms(fn)
    return eager / mean_ms(torch.compile(fn))
