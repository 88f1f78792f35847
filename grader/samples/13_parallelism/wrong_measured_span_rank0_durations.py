"""measured_bubble that takes the run's span as the sum of rank 0's durations."""


# fails: test_measured_bubble
# %% measured_bubble
def measured_bubble(timelines):
    busy = 0.0
    for intervals in timelines.values():
        covered_to = float("-inf")
        for start, end in sorted(intervals):
            if end > covered_to:
                busy += end - max(start, covered_to)
                covered_to = end
    span = sum(e - s for s, e in timelines[0])
    return 1.0 - busy / (len(timelines) * span)
