"""A correct h2d_bandwidth written differently: .to() with synchronize and perf_counter, from a
buffer made with torch.zeros (written, so a pageable copy reads it from DRAM; the reference's
torch.empty buffer is never written and reads as the kernel's zero page, from cache)."""

# %% h2d_bandwidth
import time

import torch


def h2d_bandwidth(nbytes: int, pinned: bool) -> float:
    src = torch.zeros(nbytes // 4, dtype=torch.float32)
    src = src.pin_memory() if pinned else src
    warm = src.to("cuda", non_blocking=pinned)
    del warm  # its block is reused below instead of a new cudaMalloc
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    src.to("cuda", non_blocking=pinned)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    return float(src.numel() * src.element_size() / elapsed / 1e9)
