"""A correct time_gpu written differently: a pair of CUDA events per timed call, a single
synchronize after the last one, then the median of the event times (perf_counter on the CPU)."""

# %% time_gpu
import statistics
import time

import torch


def time_gpu(fn, *args, warmup: int = 3, repeat: int = 10) -> float:
    for _ in range(warmup):
        fn(*args)
    if not torch.cuda.is_available():
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn(*args)
            times.append((time.perf_counter() - start) * 1e3)
        return float(statistics.median(times))
    pairs = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return float(statistics.median(start.elapsed_time(end) for start, end in pairs))
