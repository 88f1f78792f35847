"""parallel_map submits each item to the pool and waits for its result before submitting the
next: right values, order and workers, but one task at a time."""

# fails: test_parallel_map
# %% parallel_map
import concurrent.futures
import multiprocessing

from grader.checks.ch08_cpu_parallelism import start_method


def parallel_map(fn, items, *, workers: int, backend: str = "process") -> list:
    if backend == "thread":
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers)
    elif backend == "process":
        context = multiprocessing.get_context(start_method())
        pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context)
    else:
        raise ValueError(backend)
    with pool:
        return [pool.submit(fn, item).result() for item in items]
