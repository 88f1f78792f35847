"""time_gpu passes `args` on in its warm-up and on the CPU, but its CUDA-event branch calls fn()
with no arguments: on a GPU every timed call fails or times something else."""

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
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - t0) * 1000.0)
    return float(statistics.median(times))
