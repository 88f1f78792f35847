"""A correct compile_speedup written differently: torch.utils.benchmark.Timer (which synchronizes
CUDA itself) after one call that compiles."""

# %% compile_speedup
import torch
from torch.utils import benchmark


def compile_speedup(fn, *args) -> float:
    compiled = torch.compile(fn)
    compiled(*args)  # compilation happens here, outside the measurement

    def seconds(f):
        timer = benchmark.Timer(stmt="f(*args)", globals={"f": f, "args": args})
        return timer.blocked_autorange(min_run_time=0.2).median

    return seconds(fn) / seconds(compiled)
