"""A correct time_gpu written differently: synchronize around perf_counter and a hand-made median."""

# %% time_gpu
import time

import torch


def time_gpu(fn, *args, warmup: int = 3, repeat: int = 10) -> float:
    def wait():
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    for _ in range(warmup):
        fn(*args)
    samples = []
    for _ in range(repeat):
        wait()
        start = time.perf_counter()
        fn(*args)
        wait()
        samples.append(1000.0 * (time.perf_counter() - start))
    samples.sort()
    mid = len(samples) // 2
    return samples[mid] if len(samples) % 2 else (samples[mid - 1] + samples[mid]) / 2
