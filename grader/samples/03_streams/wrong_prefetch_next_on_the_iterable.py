"""prefetch_to_device calls next() on `batches` itself: right for a generator, but a list (or a
DataLoader) is an iterable, not an iterator, so next(batches) raises TypeError. Call iter() first."""

# fails: test_prefetch_to_device
# %% prefetch_to_device
import torch


def prefetch_to_device(batches, device):
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        for batch in batches:
            yield tuple(t.to(device) for t in batch)
        return
    copy_stream = torch.cuda.Stream(device=device)

    def load(batch):
        with torch.cuda.stream(copy_stream):
            return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)

    nxt = next(batches, None)
    pending = load(nxt) if nxt is not None else None
    while pending is not None:
        consumer = torch.cuda.current_stream(device)
        consumer.wait_stream(copy_stream)
        ready = pending
        for t in ready:
            t.record_stream(consumer)
        nxt = next(batches, None)
        pending = load(nxt) if nxt is not None else None
        yield ready
