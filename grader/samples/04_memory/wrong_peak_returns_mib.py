"""peak_memory_bytes converts its result to MiB (/ 2**20): the exercise asks for bytes."""

# fails: test_peak_memory_bytes, test_peak_memory_bytes_cuda
# %% peak_memory_bytes
import torch


def peak_memory_bytes(fn):
    if not torch.cuda.is_available():
        raise RuntimeError("peak_memory_bytes needs CUDA")
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return int((torch.cuda.max_memory_allocated() - baseline) / 2**20)
