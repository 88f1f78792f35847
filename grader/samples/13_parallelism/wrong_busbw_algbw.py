"""bus_bandwidth that returns the algorithm bandwidth S/t (in GB/s) for every op: the bus
bandwidth's correction factor is missing."""


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
    return nbytes / seconds / 1e9
