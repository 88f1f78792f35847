"""prefetch_to_device copies batch i+1 on a side stream, then calls copy_stream.synchronize()
before yielding batch i "to be safe": the host waits for every copy, so while the consumer's
own host work (launching its kernels) runs nothing is copied. It overlaps when the consumer's
kernels are long (the GPU is the bottleneck) and not when the consumer is launch-bound."""

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

    def load(batch):
        with torch.cuda.stream(copy_stream):
            return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)

    ready = None
    for batch in batches:
        pending = load(batch)
        copy_stream.synchronize()  # the copy has landed: safe to hand out
        for t in pending:
            t.record_stream(torch.cuda.current_stream(device))
        if ready is not None:
            yield ready
        ready = pending
    if ready is not None:
        yield ready
