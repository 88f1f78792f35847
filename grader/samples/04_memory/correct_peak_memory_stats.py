"""A correct peak_memory_bytes written differently: reads torch.cuda.memory_stats() counters."""

# %% peak_memory_bytes
import torch


def peak_memory_bytes(fn) -> int:
    if not torch.cuda.is_available():
        raise RuntimeError("CUDA is required")
    before = torch.cuda.memory_stats()["allocated_bytes.all.current"]
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.memory_stats()["allocated_bytes.all.peak"] - before
