"""h2d_bandwidth copies a uint8 host tensor into torch.empty(nbytes, device="cuda"), a float32
buffer: a copy between dtypes converts on the CPU into a new pageable float32 tensor first, so
4 bytes per counted byte cross the link at the pageable rate, even from pinned memory."""

# fails: test_h2d_bandwidth
# fails-on-gpu: test_h2d_bandwidth_cuda
# %% h2d_bandwidth
import torch


def h2d_bandwidth(nbytes, pinned):
    host = torch.empty(nbytes, dtype=torch.uint8)
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
    return nbytes / (start.elapsed_time(end) / 1000) / 1e9
