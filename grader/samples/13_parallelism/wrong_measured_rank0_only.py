"""measured_bubble that looks at rank 0 alone: its idle share over its own span."""


# fails: test_measured_bubble
# %% measured_bubble
def measured_bubble(timelines):
    intervals = sorted(timelines[0])
    busy, covered_to = 0.0, float("-inf")
    for start, end in intervals:
        if end > covered_to:
            busy += end - max(start, covered_to)
            covered_to = end
    return 1.0 - busy / (max(e for _, e in intervals) - intervals[0][0])
