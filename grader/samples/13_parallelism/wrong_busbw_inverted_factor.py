"""bus_bandwidth with the factor inverted: n/(n-1) (and n/(2(n-1)) for all-reduce) instead of
(n-1)/n; one rank raises ZeroDivisionError."""


# fails: test_bus_bandwidth
# %% bus_bandwidth
def bus_bandwidth(op, nbytes, seconds, world_size):
    if op not in (
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "broadcast",
        "reduce",
    ):
        raise ValueError(op)
    if world_size < 1 or seconds <= 0:
        raise ValueError("bad world_size or seconds")
    algbw = nbytes / seconds / 1e9
    if op in ("broadcast", "reduce"):
        return algbw
    n = world_size
    return algbw * (n / (2 * (n - 1)) if op == "all_reduce" else n / (n - 1))
