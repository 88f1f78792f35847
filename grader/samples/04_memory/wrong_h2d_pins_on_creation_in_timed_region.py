"""h2d_bandwidth creates the pinned buffer (torch.empty(..., pin_memory=True)) inside the timed
region, so page-locking is timed with the copy."""

# fails: test_h2d_bandwidth
# may-fail-on-gpu: test_h2d_bandwidth_cuda
# %% h2d_bandwidth
import time

import torch


def h2d_bandwidth(nbytes, pinned):
    device_buffer = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    device_buffer.copy_(host, non_blocking=pinned)
    torch.cuda.synchronize()
    return nbytes / (time.perf_counter() - t0) / 1e9
