"""overlapped_pipeline copies on a side stream but from pageable memory (no pin_memory): the copy
is synchronous for the host and cannot overlap kernels."""

# fails: test_overlapped_pipeline
# %% overlapped_pipeline
import torch


def overlapped_pipeline(model, batches, device):
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return torch.stack([model(x.to(device)) for x in batches])
    compute = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)

    def load(x):
        with torch.cuda.stream(side):
            return x.to(device, non_blocking=True)

    outputs = []
    pending = load(batches[0])
    for i in range(len(batches)):
        compute.wait_stream(side)
        x = pending
        x.record_stream(compute)
        if i + 1 < len(batches):
            pending = load(batches[i + 1])
        outputs.append(model(x))
    return torch.stack(outputs)
