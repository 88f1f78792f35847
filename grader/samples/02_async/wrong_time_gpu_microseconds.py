"""time_gpu reads time.perf_counter_ns() and divides by 1e3: that gives microseconds, not
milliseconds (1 ms = 10^6 ns)."""

# fails: test_time_gpu, test_time_gpu_cuda
# %% time_gpu
import statistics
import time

import torch


def time_gpu(fn, *args, warmup=3, repeat=10):
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append((time.perf_counter_ns() - t0) / 1e3)
    return float(statistics.median(times))
