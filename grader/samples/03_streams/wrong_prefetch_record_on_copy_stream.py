"""prefetch_to_device calls record_stream with the copy stream (where the batch was allocated,
which the allocator already knows) instead of the consumer's stream that reads it: a consumer
that falls behind the copies reads a batch whose memory a later copy has overwritten."""

# fails: test_prefetch_to_device, test_prefetch_to_device_cuda
# %% prefetch_to_device
import torch


def prefetch_to_device(batches, device):
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        for batch in batches:
            yield tuple(t.to(device) for t in batch)
        return
    copy_stream = torch.cuda.Stream(device)

    def load(batch):
        with torch.cuda.stream(copy_stream):
            moved = tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)
            for t in moved:
                t.record_stream(copy_stream)
            return moved

    iterator = iter(batches)
    nxt = next(iterator, None)
    pending = load(nxt) if nxt is not None else None
    while pending is not None:
        torch.cuda.current_stream(device).wait_stream(copy_stream)
        ready = pending
        nxt = next(iterator, None)
        pending = load(nxt) if nxt is not None else None
        yield ready
