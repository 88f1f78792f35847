"""bus_bandwidth that applies all-reduce's factor 2(n-1)/n to every collective."""


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
    return nbytes / seconds / 1e9 * 2 * (world_size - 1) / world_size
