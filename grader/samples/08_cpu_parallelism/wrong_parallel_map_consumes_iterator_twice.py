"""parallel_map returns [] early when list(items) is empty, then maps over `items` again: an
iterator is already used up by the check, so nothing is left to map."""

# fails: test_parallel_map
# %% parallel_map
import concurrent.futures
import multiprocessing

from grader.checks.ch08_cpu_parallelism import start_method


def parallel_map(fn, items, *, workers: int, backend: str = "process") -> list:
    if not list(items):
        return []
    if backend == "thread":
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
    elif backend == "process":
        context = multiprocessing.get_context(start_method())
        pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context)
    else:
        raise ValueError(backend)
    with pool:
        return list(pool.map(fn, items))
