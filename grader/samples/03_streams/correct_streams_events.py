"""A correct run_on_streams written differently: one event per stream, waited on by the current stream."""

# %% run_on_streams
import torch


def run_on_streams(fns):
    if not torch.cuda.is_available():
        return [fn() for fn in fns]
    ready = torch.cuda.Event()
    ready.record()
    outputs, events = [], []
    for fn in fns:
        s = torch.cuda.Stream()
        s.wait_event(ready)
        with torch.cuda.stream(s):
            outputs.append(fn())
            done = torch.cuda.Event()
            done.record()
        events.append(done)
    for done, out in zip(events, outputs):
        torch.cuda.current_stream().wait_event(done)
        out.record_stream(torch.cuda.current_stream())
    return outputs
