"""measured_bubble merges each rank's intervals from a clock reading of 0 (covered = 0.0, not
-inf): a timeline whose times are relative to a mark taken mid-run starts below 0, and the work
before 0 is not counted as busy."""


# fails: test_measured_bubble
# %% measured_bubble
def measured_bubble(timelines):
    if not timelines or any(not intervals for intervals in timelines.values()):
        raise ValueError("every rank needs at least one interval")
    first = min(s for intervals in timelines.values() for s, _ in intervals)
    last = max(e for intervals in timelines.values() for _, e in intervals)
    if last <= first:
        raise ValueError("the span must be positive")
    busy = 0.0
    for intervals in timelines.values():
        covered = 0.0
        for start, end in sorted(intervals):
            if end > covered:
                busy += end - max(start, covered)
                covered = end
    return 1.0 - busy / (len(timelines) * (last - first))
