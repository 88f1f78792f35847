"""peak_memory_bytes forgets to reset the peak, so an earlier, larger peak is reported."""

# fails: test_peak_memory_bytes, test_peak_memory_bytes_cuda
# %% peak_memory_bytes
import torch


def peak_memory_bytes(fn):
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - baseline)
