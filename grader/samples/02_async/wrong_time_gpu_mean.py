"""time_gpu returns the mean instead of the median, so one slow outlier moves it."""

# fails: test_time_gpu
# %% time_gpu
import time

import torch


def time_gpu(fn, *args, warmup=3, repeat=10):
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000)
    return sum(times) / len(times)
