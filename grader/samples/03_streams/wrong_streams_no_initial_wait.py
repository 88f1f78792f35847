"""run_on_streams makes the current stream wait for the side streams at the end, but never makes
the side streams wait for the current one first: a function can read its inputs before the work
that produces them (queued on the current stream) has run."""

# fails: test_run_on_streams
# may-fail-on-gpu: test_run_on_streams_cuda
# %% run_on_streams
import torch


def run_on_streams(fns):
    if not torch.cuda.is_available():
        return [fn() for fn in fns]
    current = torch.cuda.current_stream()
    streams = [torch.cuda.Stream() for _ in fns]
    results = []
    for fn, stream in zip(fns, streams):
        with torch.cuda.stream(stream):
            results.append(fn())
    for stream, result in zip(streams, results):
        current.wait_stream(stream)
        result.record_stream(current)
    return results
