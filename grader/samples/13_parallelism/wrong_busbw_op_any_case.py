"""bus_bandwidth that lower-cases the op's name first, so "All_Reduce" is taken, though any op
other than the six exact names must raise ValueError."""


# fails: test_bus_bandwidth
# %% bus_bandwidth
def bus_bandwidth(op, nbytes, seconds, world_size):
    op = op.lower()
    factors = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}
    if op not in factors and op not in ("broadcast", "reduce"):
        raise ValueError(f"unknown op {op!r}")
    if world_size < 1 or seconds <= 0:
        raise ValueError("need world_size >= 1 and seconds > 0")
    algbw = nbytes / seconds / 1e9
    if op in ("broadcast", "reduce"):
        return algbw
    return algbw * factors[op] * (world_size - 1) / world_size
