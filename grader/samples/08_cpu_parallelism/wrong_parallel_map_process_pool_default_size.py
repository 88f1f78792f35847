"""parallel_map sizes its thread pool with `workers` but leaves the process pool at its default,
os.cpu_count() processes. On a 2-core machine that passes for workers=2 and 3 (at most 2 tasks at
once); with workers=1 two tasks still run at once."""

# fails: test_parallel_map
# %% parallel_map
import concurrent.futures
import multiprocessing


def parallel_map(fn, items, *, workers: int, backend: str = "process") -> list:
    if backend == "thread":
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
    elif backend == "process":
        pool = concurrent.futures.ProcessPoolExecutor(
            mp_context=multiprocessing.get_context("fork")
        )
    else:
        raise ValueError(backend)
    with pool:
        return list(pool.map(fn, items))
