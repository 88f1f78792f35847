"""overlapped_pipeline calls record_stream, but with the copy stream (where the batch was
allocated) instead of the compute stream that reads it: the call changes nothing, and the
allocator reuses a batch's memory while the model still reads it."""

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
            moved = x.pin_memory().to(device, non_blocking=True)
            moved.record_stream(side)
            return moved

    outputs = []
    pending = load(batches[0])
    for i in range(len(batches)):
        compute.wait_stream(side)
        x = pending
        if i + 1 < len(batches):
            pending = load(batches[i + 1])
        outputs.append(model(x))
    return torch.stack(outputs)
