"""measured_bubble whose union keeps the last interval's end instead of the furthest end so far:
an interval inside another makes the next one count time twice."""


# fails: test_measured_bubble
# %% measured_bubble
def measured_bubble(timelines):
    if not timelines or not all(timelines.values()):
        raise ValueError("each rank needs intervals")
    first = min(s for iv in timelines.values() for s, _ in iv)
    last = max(e for iv in timelines.values() for _, e in iv)
    if last <= first:
        raise ValueError("span")
    busy = 0.0
    for iv in timelines.values():
        prev_end = float("-inf")
        for s, e in sorted(iv):
            busy += max(0.0, e - max(s, prev_end))
            prev_end = e  # should be max(prev_end, e)
    return 1 - busy / (len(timelines) * (last - first))
