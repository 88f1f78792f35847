"""run_on_streams orders the streams correctly but never calls record_stream on the results: once
dropped, a result's memory can be reused on its side stream while the current stream still reads it."""

# fails: test_run_on_streams
# %% run_on_streams
import torch


def run_on_streams(fns):
    if not torch.cuda.is_available():
        return [fn() for fn in fns]
    current = torch.cuda.current_stream()
    streams = [torch.cuda.Stream() for _ in fns]
    results = []
    for fn, stream in zip(fns, streams):
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            results.append(fn())
    for stream in streams:
        current.wait_stream(stream)
    return results
