"""run_on_streams creates one side stream for all the functions: they leave the default stream but
still run one after another on the side stream."""

# fails: test_run_on_streams, test_run_on_streams_cuda
# %% run_on_streams
import torch


def run_on_streams(fns):
    if not torch.cuda.is_available():
        return [fn() for fn in fns]
    current = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(current)
    results = []
    with torch.cuda.stream(side):
        for fn in fns:
            results.append(fn())
    current.wait_stream(side)
    for result in results:
        result.record_stream(current)
    return results
