"""h2d_bandwidth allocates torch.empty(nbytes), which is nbytes float32 elements (4 * nbytes
bytes), and divides by nbytes: it copies four times the data it counts."""

# fails: test_h2d_bandwidth, test_h2d_bandwidth_cuda
# %% h2d_bandwidth
import torch


def h2d_bandwidth(nbytes, pinned):
    host = torch.empty(nbytes)
    if pinned:
        host = host.pin_memory()
    dev = torch.empty(nbytes, device="cuda")
    dev.copy_(host, non_blocking=pinned)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    dev.copy_(host, non_blocking=pinned)
    end.record()
    end.synchronize()
    return nbytes / 1e9 / (start.elapsed_time(end) / 1000)
