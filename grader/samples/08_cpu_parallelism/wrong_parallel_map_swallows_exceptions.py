"""parallel_map catches a worker's exception and puts None in its place: the caller never
learns that an item failed."""

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
    results = []
    with pool:
        futures = [pool.submit(fn, item) for item in items]
        for f in futures:
            try:
                results.append(f.result())
            except Exception:
                results.append(None)
    return results
