"""prefetch_to_device overlaps correctly but never calls record_stream: a batch allocated on the
copy stream and freed while the consumer's kernel still reads it can be handed to the next copy."""

# fails: test_prefetch_to_device, test_prefetch_to_device_cuda
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

    iterator = iter(batches)
    pending = load(next(iterator))
    while pending is not None:
        torch.cuda.current_stream().wait_stream(copy_stream)
        ready = pending
        nxt = next(iterator, None)
        pending = load(nxt) if nxt is not None else None
        yield ready
