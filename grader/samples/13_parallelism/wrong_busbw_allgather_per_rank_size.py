"""bus_bandwidth that takes nbytes of all-gather and reduce-scatter as the per-rank piece and
multiplies it by the world size again (nbytes is already the full buffer, nccl-tests' S)."""


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
    n = world_size
    if op == "all_reduce":
        return nbytes / seconds / 1e9 * 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return n * nbytes / seconds / 1e9 * (n - 1) / n
    if op == "all_to_all":
        return nbytes / seconds / 1e9 * (n - 1) / n
    return nbytes / seconds / 1e9
