"""bus_bandwidth that rejects world_size == 0 only: a negative world size returns a number."""


# fails: test_bus_bandwidth
# %% bus_bandwidth
def bus_bandwidth(op, nbytes, seconds, world_size):
    factors = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "all_to_all": 1}
    if op not in factors and op not in ("broadcast", "reduce"):
        raise ValueError(op)
    if world_size == 0 or seconds <= 0:
        raise ValueError("bad world size or time")
    algbw = nbytes / seconds / 1e9
    if op in ("broadcast", "reduce"):
        return algbw
    return algbw * factors[op] * (world_size - 1) / world_size
