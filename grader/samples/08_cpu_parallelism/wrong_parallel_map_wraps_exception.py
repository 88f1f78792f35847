"""parallel_map re-raises a worker's error as a RuntimeError: the caller cannot catch the
original type (except ValueError: ... misses it)."""

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
        try:
            return list(pool.map(fn, items))
        except Exception as exc:
            raise RuntimeError(f"a worker failed: {exc}") from exc
