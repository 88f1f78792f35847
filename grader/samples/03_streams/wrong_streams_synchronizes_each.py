"""run_on_streams gives every function its own stream but calls stream.synchronize() after each
one: the host waits for each function before starting the next, so nothing runs concurrently."""

# fails: test_run_on_streams, test_run_on_streams_cuda
# %% run_on_streams
import torch


def run_on_streams(fns):
    if not torch.cuda.is_available():
        return [fn() for fn in fns]
    current = torch.cuda.current_stream()
    results = []
    for fn in fns:
        stream = torch.cuda.Stream()
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            results.append(fn())
        stream.synchronize()
        results[-1].record_stream(current)
    return results
