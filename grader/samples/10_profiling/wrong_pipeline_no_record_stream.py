"""overlapped_pipeline pins, copies on a side stream and waits for each batch's copy, but never
calls record_stream: a batch allocated on the copy stream is freed while the compute stream may
still read it, and the caching allocator hands its memory to the next copy. On a copy-bound
pipeline the reads are over by then; on a compute-bound one the copy overwrites a batch the model
is still reading."""

# fails: test_overlapped_pipeline
# may-fail-on-gpu: test_overlapped_pipeline_cuda
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
    pending = load(batches[0])
    for i in range(len(batches)):
        compute.wait_stream(side)
        x = pending
        if i + 1 < len(batches):
            pending = load(batches[i + 1])
        outputs.append(model(x))
    return torch.stack(outputs)
