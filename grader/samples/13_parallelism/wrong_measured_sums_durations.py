"""measured_bubble that sums the intervals' durations, so that time where intervals of one rank
overlap is counted twice (right on every timeline without overlaps)."""


# fails: test_measured_bubble
# %% measured_bubble
def measured_bubble(timelines):
    first = min(s for intervals in timelines.values() for s, _ in intervals)
    last = max(e for intervals in timelines.values() for _, e in intervals)
    busy = sum(e - s for intervals in timelines.values() for s, e in intervals)
    return 1.0 - busy / (len(timelines) * (last - first))
