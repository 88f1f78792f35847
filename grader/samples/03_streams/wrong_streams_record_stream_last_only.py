"""run_on_streams calls record_stream after the loop on the loop's variable: only the last result
is marked as used by the current stream; the others' memory can be reused on their side streams
while the current stream still reads them."""

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
            result = fn()
        results.append(result)
    for stream in streams:
        current.wait_stream(stream)
    result.record_stream(current)
    return results
