"""A correct loader_speedup written differently: nanosecond clock, the batches counted in a list
comprehension, and the ratio returned as a NumPy float64 (a subclass of float)."""

# %% loader_speedup
import time

import numpy as np
from torch.utils.data import DataLoader


def loader_speedup(dataset, batch_size, workers) -> float:
    def ns_per_sample(num_workers):
        start = time.perf_counter_ns()
        sizes = [len(batch) for batch in DataLoader(dataset, batch_size, num_workers=num_workers)]
        return (time.perf_counter_ns() - start) / sum(sizes)

    return np.float64(ns_per_sample(0)) / np.float64(ns_per_sample(workers))
