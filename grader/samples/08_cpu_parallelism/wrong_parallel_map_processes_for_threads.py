"""parallel_map always uses a process pool: backend="thread" runs in other processes too (and any
unknown backend is accepted)."""

# fails: test_parallel_map
# %% parallel_map
import concurrent.futures
import multiprocessing

from grader.checks.ch08_cpu_parallelism import start_method


def parallel_map(fn, items, *, workers: int, backend: str = "process") -> list:
    context = multiprocessing.get_context(start_method())
    with concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        return list(pool.map(fn, items))
