"""h2d_bandwidth stops the clock right after a non-blocking copy, without synchronizing."""

# fails: test_h2d_bandwidth, test_h2d_bandwidth_cuda
# %% h2d_bandwidth
import time

import torch


def h2d_bandwidth(nbytes, pinned):
    host = torch.empty(nbytes, dtype=torch.uint8)
    if pinned:
        host = host.pin_memory()
    t0 = time.perf_counter()
    host.to("cuda", non_blocking=True)
    return nbytes / (time.perf_counter() - t0) / 1e9
