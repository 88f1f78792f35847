"""h2d_bandwidth prepares and pins its buffers before the clock and synchronizes correctly, but
times the very first copy: no warm-up copy, so the one-time cost of the first transfer is timed
as if it were bandwidth."""

# fails: test_h2d_bandwidth
# %% h2d_bandwidth
import torch


def h2d_bandwidth(nbytes, pinned):
    host = torch.empty(nbytes, dtype=torch.uint8)
    if pinned:
        host = host.pin_memory()
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    dev.copy_(host, non_blocking=pinned)
    end.record()
    end.synchronize()
    return nbytes / 1e9 / (start.elapsed_time(end) / 1000)
