"""bubble_fraction that gives 1F1B a smaller bubble than GPipe (as if alternating forwards and
backwards filled the fill and drain: half of GPipe's idle slots)."""


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
    idle = p - 1 if schedule == "gpipe" else (p - 1) / 2
    return idle / (virtual_stages * m + idle)
