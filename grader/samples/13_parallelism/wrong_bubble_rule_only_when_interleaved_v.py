"""bubble_fraction that applies Megatron's rule (m a multiple of p) only when virtual_stages > 1,
and rejects p == 0 and m == 0 rather than p < 1 and m < 1."""


# fails: test_bubble_fraction
# %% bubble_fraction
def bubble_fraction(p, m, schedule="1f1b", virtual_stages=1):
    if schedule not in ("gpipe", "1f1b", "interleaved_1f1b"):
        raise ValueError(f"unknown schedule {schedule!r}")
    if p == 0 or m == 0 or virtual_stages == 0:
        raise ValueError("p, m and virtual_stages must be >= 1")
    if schedule != "interleaved_1f1b" and virtual_stages != 1:
        raise ValueError("virtual stages need the interleaved schedule")
    if schedule == "interleaved_1f1b" and virtual_stages > 1 and m % p:
        raise ValueError("m must be a multiple of p")
    return (p - 1) / (virtual_stages * m + p - 1)
