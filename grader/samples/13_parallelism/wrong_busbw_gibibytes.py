"""bus_bandwidth in GiB/s (divides by 2**30) instead of GB/s (1e9 bytes/s), nccl-tests' unit."""


# fails: test_bus_bandwidth
# %% bus_bandwidth
def bus_bandwidth(op, nbytes, seconds, world_size):
    factors = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}
    if op not in factors and op not in ("broadcast", "reduce"):
        raise ValueError(op)
    if world_size < 1 or seconds <= 0:
        raise ValueError("bad world_size or seconds")
    algbw = nbytes / seconds / 2**30
    if op in factors:
        return algbw * factors[op] * (world_size - 1) / world_size
    return algbw
