"""prefetch_to_device pins and copies non-blocking, but on the default stream, behind the compute."""

# fails: test_prefetch_to_device, test_prefetch_to_device_cuda
# %% prefetch_to_device
import torch


def prefetch_to_device(batches, device):
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        for batch in batches:
            yield tuple(t.to(device) for t in batch)
        return
    batches = list(batches)
    pending = tuple(t.pin_memory().to(device, non_blocking=True) for t in batches[0])
    for i in range(len(batches)):
        ready = pending
        if i + 1 < len(batches):
            pending = tuple(t.pin_memory().to(device, non_blocking=True) for t in batches[i + 1])
        yield ready
