"""peak_memory_bytes subtracts memory_allocated() read after fn() returns instead of before: what
fn still holds when it returns (a training step's gradients) is taken off its peak."""

# fails: test_peak_memory_bytes, test_peak_memory_bytes_cuda
# %% peak_memory_bytes
import torch


def peak_memory_bytes(fn):
    if not torch.cuda.is_available():
        raise RuntimeError("peak_memory_bytes needs CUDA")
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated())
