"""A correct overlapped_pipeline written differently: each batch's device buffer is allocated on
the compute stream (so its memory belongs to the stream that reads it and needs no
record_stream), the copy stream first waits for the compute stream's earlier work and then fills
the buffer, and the compute stream waits for an event recorded after the copy."""

# %% overlapped_pipeline
import torch


def overlapped_pipeline(model, batches, device):
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return torch.stack([model(x.to(device)) for x in batches])
    compute = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)

    def load(x):
        buffer = torch.empty_like(x, device=device)  # allocated on the compute stream
        side.wait_stream(compute)
        with torch.cuda.stream(side):
            buffer.copy_(x.pin_memory(), non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(side)
        return buffer, copied

    outputs = []
    pending = load(batches[0])
    for i in range(len(batches)):
        x, copied = pending
        compute.wait_event(copied)
        if i + 1 < len(batches):
            pending = load(batches[i + 1])
        outputs.append(model(x))
    return torch.stack(outputs)
