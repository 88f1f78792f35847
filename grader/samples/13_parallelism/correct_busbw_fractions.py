"""A correct bus_bandwidth written differently: exact fractions for the factor, the bytes moved
per rank (the ring's traffic) over the time."""


# %% bus_bandwidth
def bus_bandwidth(op, nbytes, seconds, world_size):
    from fractions import Fraction

    if world_size < 1:
        raise ValueError("world_size < 1")
    if seconds <= 0:
        raise ValueError("seconds <= 0")
    n = world_size
    if op == "all_reduce":
        share = Fraction(2 * (n - 1), n)  # reduce-scatter then all-gather
    elif op in {"all_gather", "reduce_scatter", "all_to_all"}:
        share = Fraction(n - 1, n)
    elif op in {"broadcast", "reduce"}:
        share = Fraction(1)
    else:
        raise ValueError(f"unknown collective: {op!r}")
    bytes_on_each_link = float(share * nbytes)
    return bytes_on_each_link / seconds * 1e-9
