"""A correct parallel_map written differently: multiprocessing.Pool and its ThreadPool twin,
apply_async per item, results read in item order (get() re-raises a worker's error)."""

# %% parallel_map
import multiprocessing
from multiprocessing.pool import ThreadPool


def parallel_map(fn, items, *, workers: int, backend: str = "process") -> list:
    items = list(items)
    if backend == "process":
        pool = multiprocessing.get_context("fork").Pool(processes=workers)
    elif backend == "thread":
        pool = ThreadPool(processes=workers)
    else:
        raise ValueError(f"unknown backend {backend!r}")
    try:
        pending = [pool.apply_async(fn, (item,)) for item in items]
        return [p.get() for p in pending]
    finally:
        pool.terminate()
        pool.join()
