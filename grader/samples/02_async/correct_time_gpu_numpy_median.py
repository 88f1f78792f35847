"""A correct time_gpu written differently: CUDA events on a GPU, perf_counter_ns on the CPU, and
NumPy's median, returned as the numpy.float64 it is (a subclass of float: accepted)."""

# %% time_gpu
import time

import numpy as np
import torch


def time_gpu(fn, *args, warmup: int = 3, repeat: int = 10) -> float:
    for _ in range(warmup):
        fn(*args)
    times = np.empty(repeat)
    for i in range(repeat):
        if torch.cuda.is_available():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*args)
            end.record()
            end.synchronize()
            times[i] = start.elapsed_time(end)
        else:
            t0 = time.perf_counter_ns()
            fn(*args)
            times[i] = (time.perf_counter_ns() - t0) / 1e6
    return np.median(times)
