"""overlapped_pipeline pins and copies non-blocking, but on the compute stream: each copy waits
for the previous batch's kernels, so nothing overlaps."""

# fails: test_overlapped_pipeline, test_overlapped_pipeline_cuda
# %% overlapped_pipeline
import torch


def overlapped_pipeline(model, batches, device):
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return torch.stack([model(x.to(device)) for x in batches])
    outputs = []
    pending = batches[0].pin_memory().to(device, non_blocking=True)
    for i in range(len(batches)):
        x = pending
        if i + 1 < len(batches):
            pending = batches[i + 1].pin_memory().to(device, non_blocking=True)
        outputs.append(model(x))
    return torch.stack(outputs)
