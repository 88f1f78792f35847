"""h2d_bandwidth reports GiB/s (2^30 bytes) instead of GB/s (10^9 bytes)."""

# fails: test_h2d_bandwidth
# %% h2d_bandwidth
import torch


def h2d_bandwidth(nbytes, pinned):
    host = torch.empty(nbytes, dtype=torch.uint8)
    if pinned:
        host = host.pin_memory()
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dev.copy_(host, non_blocking=pinned)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    dev.copy_(host, non_blocking=pinned)
    end.record()
    end.synchronize()
    return nbytes / 2**30 / (start.elapsed_time(end) / 1000)
