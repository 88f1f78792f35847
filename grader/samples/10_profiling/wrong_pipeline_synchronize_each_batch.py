"""overlapped_pipeline issues the next batch's copy on a side stream and then, to be safe, calls
torch.cuda.synchronize() before computing: the host waits for that copy, so it has finished
before the model's kernels for this batch are even launched, and copy i+1 never overlaps the
compute on batch i. Where a batch computes in about its copy time (the simulated pipeline) that
hides about a third of the copy time. On the compute-bound real-GPU pipeline (compute about 8x
the copy on an H200) it passes: the copy of batch i+1 is issued before the synchronize, while
batch i-1's kernels still run, so 6 of the 8 copies hide behind them."""

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
            return x.pin_memory().to(device, non_blocking=True)

    outputs = []
    pending = load(batches[0])
    for i in range(len(batches)):
        compute.wait_stream(side)
        x = pending
        x.record_stream(compute)
        if i + 1 < len(batches):
            pending = load(batches[i + 1])
        torch.cuda.synchronize()
        outputs.append(model(x))
    return torch.stack(outputs)
