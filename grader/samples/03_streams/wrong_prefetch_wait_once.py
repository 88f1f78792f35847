"""prefetch_to_device makes the consumer's stream wait for the copy stream once, before the first
batch, and never again: every later batch can be read before its copy has landed."""

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
    copy_stream = torch.cuda.Stream(device)
    consumer = torch.cuda.current_stream(device)

    def load(batch):
        with torch.cuda.stream(copy_stream):
            return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)

    iterator = iter(batches)
    first = next(iterator, None)
    if first is None:
        return
    pending = load(first)
    consumer.wait_stream(copy_stream)
    while pending is not None:
        ready = pending
        for t in ready:
            t.record_stream(consumer)
        nxt = next(iterator, None)
        pending = load(nxt) if nxt is not None else None
        yield ready
