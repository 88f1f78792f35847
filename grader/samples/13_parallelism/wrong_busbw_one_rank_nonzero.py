"""bus_bandwidth that avoids a zero factor with one rank by counting at least one link
(max(n-1, 1)/n): with one rank nothing crosses a link and nccl-tests' busbw is 0."""


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
    links = max(world_size - 1, 1)
    share = {"all_reduce": 2 * links, "broadcast": world_size, "reduce": world_size}
    return nbytes / seconds / 1e9 * share.get(op, links) / world_size
