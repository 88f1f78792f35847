"""parallel_map leaves the pool size at its default instead of `workers`: more tasks run at once
than asked (a thread pool defaults to min(32, cores + 4) threads)."""

# fails: test_parallel_map
# %% parallel_map
import concurrent.futures
import multiprocessing


def parallel_map(fn, items, *, workers: int, backend: str = "process") -> list:
    if backend == "thread":
        pool = concurrent.futures.ThreadPoolExecutor()
    elif backend == "process":
        pool = concurrent.futures.ProcessPoolExecutor(
            mp_context=multiprocessing.get_context("fork")
        )
    else:
        raise ValueError(backend)
    with pool:
        return list(pool.map(fn, items))
