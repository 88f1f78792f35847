"""compile_speedup calls torch.cuda.synchronize() around every timed call whatever the inputs'
device: on a machine without CUDA that raises, though CPU tensors need no synchronization (the
inputs' device decides). On a GPU the extra synchronizations wait for nothing and it gets full
marks: only machines without one prove this mistake."""

# fails-on-cpu: test_compile_speedup
# %% compile_speedup
import statistics
import time

import torch


def compile_speedup(fn, *args) -> float:
    def median_ms(f, warmup=5, repeat=50):
        for _ in range(warmup):
            f(*args)
        times = []
        for _ in range(repeat):
            torch.cuda.synchronize()
            start = time.perf_counter()
            f(*args)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1000)
        return statistics.median(times)

    return median_ms(fn) / median_ms(torch.compile(fn))
