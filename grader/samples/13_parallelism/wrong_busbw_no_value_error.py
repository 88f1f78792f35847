"""bus_bandwidth that treats any unknown op as all-reduce-like and does not check world_size
and seconds (no ValueError)."""


# fails: test_bus_bandwidth
# %% bus_bandwidth
def bus_bandwidth(op, nbytes, seconds, world_size):
    n = world_size
    if op in ("broadcast", "reduce"):
        return nbytes / seconds / 1e9
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return nbytes / seconds / 1e9 * (n - 1) / n
    return nbytes / seconds / 1e9 * 2 * (n - 1) / n
