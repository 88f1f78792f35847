"""prefetch_to_device uses non_blocking=True on a side stream but never pins the memory."""

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
            return tuple(t.to(device, non_blocking=True) for t in batch)

    batches = list(batches)
    pending = load(batches[0])
    for i in range(len(batches)):
        torch.cuda.current_stream().wait_stream(copy_stream)
        ready = pending
        if i + 1 < len(batches):
            pending = load(batches[i + 1])
        yield ready
