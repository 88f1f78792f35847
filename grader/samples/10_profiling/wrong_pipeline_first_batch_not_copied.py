"""overlapped_pipeline starts the loop with the first batch itself, not a copy of it: batch 0
is still a CPU tensor when the model and record_stream get it (on a GPU both refuse a host
tensor)."""

# fails: test_overlapped_pipeline
# fails-on-gpu: test_overlapped_pipeline_cuda
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
            return x.pin_memory().to(device, non_blocking=True)

    outputs = []
    pending = batches[0]
    for i in range(len(batches)):
        compute.wait_stream(side)
        x = pending
        x.record_stream(compute)
        if i + 1 < len(batches):
            pending = load(batches[i + 1])
        outputs.append(model(x))
    return torch.stack(outputs)
