"""run_on_streams makes the current stream wait after the loop with the loop's variable: only the
last side stream is waited for. It goes unnoticed when every function takes as long as the last."""

# fails: test_run_on_streams
# may-fail-on-gpu: test_run_on_streams_cuda
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
            result = fn()
        result.record_stream(current)
        results.append(result)
    current.wait_stream(stream)
    return results
