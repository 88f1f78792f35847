"""compile_speedup warms up and times each call, but averages the timings instead of taking the
median: one slow call (a pause of the process) moves the result."""

# fails: test_compile_speedup
# %% compile_speedup
import statistics
import time

import torch


def compile_speedup(fn, *args) -> float:
    cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)

    def mean_ms(f, warmup=5, repeat=50):
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
        return statistics.mean(times)

    compiled = torch.compile(fn)
    return mean_ms(fn) / mean_ms(compiled)
