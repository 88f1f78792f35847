"""bubble_fraction that counts at least p micro-batches for 1F1B (max(m, p)), as if the schedule
filled the pipeline with micro-batches it does not have."""


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
    if schedule == "1f1b":
        m = max(m, p)
    return (p - 1) / (virtual_stages * m + p - 1)
