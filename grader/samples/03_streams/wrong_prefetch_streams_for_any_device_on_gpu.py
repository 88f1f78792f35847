"""prefetch_to_device takes the stream path whenever CUDA is available, whatever `device` is:
asked for the CPU on a GPU machine, it pins and copies with non_blocking on a CUDA stream and
yields tensors that are not on the CPU (or fails), instead of moving each batch to `device`."""

# fails: test_prefetch_to_device
# %% prefetch_to_device
import torch


def prefetch_to_device(batches, device):
    device = torch.device(device)
    if not torch.cuda.is_available():
        for batch in batches:
            yield tuple(t.to(device) for t in batch)
        return
    copy_stream = torch.cuda.Stream()

    def load(batch):
        with torch.cuda.stream(copy_stream):
            return tuple(t.pin_memory().to("cuda", non_blocking=True) for t in batch)

    iterator = iter(batches)
    nxt = next(iterator, None)
    pending = load(nxt) if nxt is not None else None
    while pending is not None:
        consumer = torch.cuda.current_stream()
        consumer.wait_stream(copy_stream)
        ready = pending
        for t in ready:
            t.record_stream(consumer)
        nxt = next(iterator, None)
        pending = load(nxt) if nxt is not None else None
        yield ready
