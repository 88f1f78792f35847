"""peak_memory_bytes resets the peak but does not subtract the memory allocated before fn."""

# fails: test_peak_memory_bytes, test_peak_memory_bytes_cuda
# %% peak_memory_bytes
import torch


def peak_memory_bytes(fn):
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated())
