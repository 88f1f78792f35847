"""h2d_bandwidth pins the host buffer inside the timed region."""

# fails: test_h2d_bandwidth, test_h2d_bandwidth_cuda
# %% h2d_bandwidth
import torch


def h2d_bandwidth(nbytes, pinned):
    host = torch.empty(nbytes, dtype=torch.uint8)
    dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    src = host.pin_memory() if pinned else host
    dev.copy_(src, non_blocking=pinned)
    end.record()
    end.synchronize()
    return nbytes / (start.elapsed_time(end) / 1000) / 1e9
