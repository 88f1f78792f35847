"""A correct h2d_bandwidth written differently: the host buffer is created pinned
(torch.empty(..., pin_memory=True)) instead of pinned afterwards with .pin_memory()."""

# %% h2d_bandwidth
import torch


def h2d_bandwidth(nbytes: int, pinned: bool) -> float:
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
    device_buffer = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    device_buffer.copy_(host, non_blocking=pinned)  # warm-up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    device_buffer.copy_(host, non_blocking=pinned)
    end.record()
    end.synchronize()
    return nbytes / (start.elapsed_time(end) / 1e3) / 1e9
