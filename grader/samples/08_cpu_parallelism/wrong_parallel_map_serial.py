"""parallel_map calls fn in a loop in this process: right values and order, but no workers at
all (one task at a time, never in another process)."""


# fails: test_parallel_map
# %% parallel_map
def parallel_map(fn, items, *, workers: int, backend: str = "process") -> list:
    if backend not in ("process", "thread"):
        raise ValueError(backend)
    return [fn(item) for item in items]
