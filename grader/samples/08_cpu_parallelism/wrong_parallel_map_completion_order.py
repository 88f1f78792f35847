"""parallel_map collects results with as_completed: in the order the workers finish, not the
order of the items."""

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
        futures = [pool.submit(fn, item) for item in items]
        return [f.result() for f in concurrent.futures.as_completed(futures)]
