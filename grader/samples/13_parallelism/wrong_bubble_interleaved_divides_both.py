"""bubble_fraction that divides both the fill-and-drain and the whole step by v for interleaved
1F1B, so that v cancels: ((p-1)/v) / ((m+p-1)/v)."""


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
    v = virtual_stages
    return ((p - 1) / v) / ((m + p - 1) / v)
