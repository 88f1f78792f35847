"""overlapped_pipeline decides on streams from torch.cuda.is_available() alone: asked for
device="cpu" on a machine with a GPU, it copies the batches to the GPU on a side stream anyway
(and fails there: CUDA streams need a CUDA device)."""

# fails: test_overlapped_pipeline
# %% overlapped_pipeline
import torch


def overlapped_pipeline(model, batches, device):
    if not torch.cuda.is_available():
        return torch.stack([model(x.to(device)) for x in batches])
    compute = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)

    def load(x):
        with torch.cuda.stream(side):
            return x.pin_memory().to(device, non_blocking=True)

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
