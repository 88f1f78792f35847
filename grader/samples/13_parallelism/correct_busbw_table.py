"""A correct bus_bandwidth written differently: a table of (numerator, denominator) of each
op's factor and the bytes per second converted at the end."""


# %% bus_bandwidth
def bus_bandwidth(op: str, nbytes: int, seconds: float, world_size: int) -> float:
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    n = world_size
    table = {
        "all_reduce": (2 * (n - 1), n),
        "reduce_scatter": (n - 1, n),
        "all_gather": (n - 1, n),
        "all_to_all": (n - 1, n),
        "broadcast": (1, 1),
        "reduce": (1, 1),
    }
    try:
        num, den = table[op]
    except KeyError:
        raise ValueError(f"unknown op {op}") from None
    bytes_per_s = nbytes * num / (den * seconds)
    return bytes_per_s / 10**9
