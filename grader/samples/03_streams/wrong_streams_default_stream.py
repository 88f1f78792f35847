"""run_on_streams calls every function on the current (default) stream, one after another."""


# fails: test_run_on_streams, test_run_on_streams_cuda
# %% run_on_streams
def run_on_streams(fns):
    return [fn() for fn in fns]
