"""measured_bubble that divides by the sum of each rank's own span (its first start to its last
end) instead of the number of ranks times the whole run's span."""


# fails: test_measured_bubble
# %% measured_bubble
def measured_bubble(timelines):
    busy = spans = 0.0
    for intervals in timelines.values():
        covered_to = float("-inf")
        for start, end in sorted(intervals):
            if end > covered_to:
                busy += end - max(start, covered_to)
                covered_to = end
        spans += max(e for _, e in intervals) - min(s for s, _ in intervals)
    return 1.0 - busy / spans
