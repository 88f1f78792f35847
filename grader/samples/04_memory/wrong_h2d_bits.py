"""h2d_bandwidth reports gigabits per second (bytes * 8), as link speeds are quoted: the
exercise asks for GB/s, gigabytes."""

# fails: test_h2d_bandwidth, test_h2d_bandwidth_cuda
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
    return nbytes * 8 / 1e9 / (start.elapsed_time(end) / 1000)
