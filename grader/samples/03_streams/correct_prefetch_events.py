"""A correct prefetch_to_device written differently: a queue of (event, batch) pairs and wait_event."""

# %% prefetch_to_device
import collections

import torch


def prefetch_to_device(batches, device):
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        yield from (tuple(t.to(device) for t in b) for b in batches)
        return
    side = torch.cuda.Stream(device)
    queue = collections.deque()

    def enqueue(batch):
        with torch.cuda.stream(side):
            moved = tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)
            done = torch.cuda.Event()
            done.record(side)
        queue.append((done, moved))

    for batch in batches:
        enqueue(batch)
        if len(queue) == 2:
            done, moved = queue.popleft()
            torch.cuda.current_stream(device).wait_event(done)
            for t in moved:
                t.record_stream(torch.cuda.current_stream(device))
            yield moved
    while queue:
        done, moved = queue.popleft()
        torch.cuda.current_stream(device).wait_event(done)
        for t in moved:
            t.record_stream(torch.cuda.current_stream(device))
        yield moved
