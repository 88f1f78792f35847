"""time_gpu hands the timing to torch.utils.benchmark.Timer, which warms up and chooses how many
times to call fn itself: fn is not called exactly warmup + repeat times."""

# fails: test_time_gpu, test_time_gpu_cuda
# %% time_gpu
from torch.utils import benchmark


def time_gpu(fn, *args, warmup=3, repeat=10):
    timer = benchmark.Timer(stmt="fn(*args)", globals={"fn": fn, "args": args})
    return float(timer.blocked_autorange(min_run_time=0.1).median * 1e3)
