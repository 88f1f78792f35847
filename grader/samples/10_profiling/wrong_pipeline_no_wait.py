"""overlapped_pipeline copies on a side stream but never makes the compute stream wait: the model
reads a batch before its copy has landed."""

# fails: test_overlapped_pipeline
# may-fail-on-gpu: test_overlapped_pipeline_cuda
# %% overlapped_pipeline
import torch


def overlapped_pipeline(model, batches, device):
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return torch.stack([model(x.to(device)) for x in batches])
    side = torch.cuda.Stream(device)

    def load(x):
        with torch.cuda.stream(side):
            return x.pin_memory().to(device, non_blocking=True)

    outputs = []
    pending = load(batches[0])
    for i in range(len(batches)):
        x = pending
        if i + 1 < len(batches):
            pending = load(batches[i + 1])
        outputs.append(model(x))
    return torch.stack(outputs)
