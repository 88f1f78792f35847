"""peak_memory_bytes measures memory_reserved (the allocator's cache) instead of allocated bytes."""

# fails: test_peak_memory_bytes, test_peak_memory_bytes_cuda
# %% peak_memory_bytes
import torch


def peak_memory_bytes(fn):
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_reserved() - baseline)
