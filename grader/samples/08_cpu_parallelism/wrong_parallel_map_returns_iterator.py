"""parallel_map returns executor.map's iterator instead of a list: the values are right, but the
caller gets a generator (which cannot be indexed, and here cannot even be handed to the grader)."""

# fails: test_parallel_map
# %% parallel_map
import concurrent.futures
import multiprocessing


def parallel_map(fn, items, *, workers: int, backend: str = "process") -> list:
    if backend == "thread":
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
    elif backend == "process":
        pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=workers, mp_context=multiprocessing.get_context("fork")
        )
    else:
        raise ValueError(backend)
    with pool:
        return pool.map(fn, items)
