"""bubble_fraction that applies virtual_stages to any schedule instead of raising ValueError
when a GPipe or 1F1B call passes virtual_stages != 1 (the formula itself is right)."""


# fails: test_bubble_fraction
# %% bubble_fraction
def bubble_fraction(p, m, schedule="1f1b", virtual_stages=1):
    if schedule not in ("gpipe", "1f1b", "interleaved_1f1b"):
        raise ValueError(f"unknown schedule {schedule!r}")
    if p < 1 or m < 1 or virtual_stages < 1:
        raise ValueError("p, m and virtual_stages must be >= 1")
    if schedule == "interleaved_1f1b" and m % p:
        raise ValueError("m must be a multiple of p")
    return (p - 1) / (virtual_stages * m + p - 1)
