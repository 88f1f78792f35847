"""prefetch_to_device copies on a side stream but never makes the consumer wait for it."""

# fails: test_prefetch_to_device
# may-fail-on-gpu: test_prefetch_to_device_cuda
# %% prefetch_to_device
import torch


def prefetch_to_device(batches, device):
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        for batch in batches:
            yield tuple(t.to(device) for t in batch)
        return
    copy_stream = torch.cuda.Stream()

    def load(batch):
        with torch.cuda.stream(copy_stream):
            return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)

    pending = None
    for batch in batches:
        nxt = load(batch)
        if pending is not None:
            yield pending
        pending = nxt
    if pending is not None:
        yield pending
