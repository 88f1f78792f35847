"""parallel_map keeps one of the `workers` for the calling process (max_workers=workers - 1):
with workers=1 the pool cannot even be made, and with 2 only one task runs at a time."""

# fails: test_parallel_map
# %% parallel_map
import concurrent.futures
import multiprocessing

from grader.checks.ch08_cpu_parallelism import start_method


def parallel_map(fn, items, *, workers: int, backend: str = "process") -> list:
    if backend == "thread":
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers - 1)
    elif backend == "process":
        context = multiprocessing.get_context(start_method())
        pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers - 1, mp_context=context)
    else:
        raise ValueError(backend)
    with pool:
        return list(pool.map(fn, items))
