"""time_gpu times every call, warm-up included, and takes the median of all of them: with one
warm-up and one timed call, the slow first call is half of the result."""

# fails: test_time_gpu
# may-fail-on-gpu: test_time_gpu_cuda
# %% time_gpu
import statistics
import time

import torch


def time_gpu(fn, *args, warmup=3, repeat=10):
    times = []
    for _ in range(warmup + repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1000.0)
    return float(statistics.median(times))
