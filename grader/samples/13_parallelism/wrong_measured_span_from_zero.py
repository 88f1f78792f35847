"""measured_bubble that takes the span as the last end, as if the run started at time 0: right
only for timelines whose first start is 0 (recorded times have any origin)."""


# fails: test_measured_bubble
# %% measured_bubble
def measured_bubble(timelines):
    if not timelines or not all(timelines.values()):
        raise ValueError("each rank needs intervals")
    span = max(e for iv in timelines.values() for _, e in iv)
    if span <= 0:
        raise ValueError("the span must be positive")
    busy = 0.0
    for iv in timelines.values():
        covered = float("-inf")
        for s, e in sorted(iv):
            if e > covered:
                busy += e - max(s, covered)
                covered = e
    return 1 - busy / (len(timelines) * span)
