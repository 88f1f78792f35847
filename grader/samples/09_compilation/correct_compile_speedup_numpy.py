"""A correct compile_speedup written differently: three warm-up calls, NumPy's median of 40
timed calls of each (synchronizing when the inputs are on a GPU), returned as a NumPy float64."""

# %% compile_speedup
import time

import numpy as np
import torch


def compile_speedup(fn, *args) -> float:
    on_gpu = any(torch.is_tensor(a) and a.device.type == "cuda" for a in args)

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    def median_s(f):
        for _ in range(3):
            f(*args)
        times = []
        for _ in range(40):
            sync()
            start = time.perf_counter()
            f(*args)
            sync()
            times.append(time.perf_counter() - start)
        return np.median(times)

    compiled = torch.compile(fn)
    return median_s(fn) / median_s(compiled)
