"""measured_bubble right on every valid timeline, but it raises no ValueError for an empty
timeline, a rank without intervals or a zero span (it returns a number or fails otherwise)."""


# fails: test_measured_bubble
# %% measured_bubble
def measured_bubble(timelines):
    ranks = [iv for iv in timelines.values() if iv]
    if not ranks:
        return 0.0
    first = min(s for iv in ranks for s, _ in iv)
    last = max(e for iv in ranks for _, e in iv)
    span = (last - first) or 1.0
    busy = 0.0
    for iv in ranks:
        covered = float("-inf")
        for s, e in sorted(iv):
            if e > covered:
                busy += e - max(s, covered)
                covered = e
    return 1 - busy / (len(timelines) * span)
