"""A correct overlapped_pipeline written differently: all copies issued up front on a side
stream, one event recorded after each, and the compute stream waits on batch i's event alone."""

# %% overlapped_pipeline
import torch


def overlapped_pipeline(model, batches, device):
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return torch.stack([model(x.to(device)) for x in batches])
    side = torch.cuda.Stream(device)
    staged = []
    for x in batches:
        with torch.cuda.stream(side):
            moved = x.pin_memory().to(device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(side)
        staged.append((moved, done))
    outputs = []
    for moved, done in staged:
        torch.cuda.current_stream(device).wait_event(done)
        moved.record_stream(torch.cuda.current_stream(device))
        outputs.append(model(moved))
    return torch.stack(outputs)
