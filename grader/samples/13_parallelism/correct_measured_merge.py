"""A correct measured_bubble written differently: merge each rank's intervals into disjoint ones
first (a list of [start, end]), then add their lengths; the span from the merged lists."""


# %% measured_bubble
def _merged(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def measured_bubble(timelines):
    if len(timelines) == 0:
        raise ValueError("no ranks")
    merged = {rank: _merged(iv) for rank, iv in timelines.items()}
    if any(not m for m in merged.values()):
        raise ValueError("a rank without intervals")
    t0 = min(m[0][0] for m in merged.values())
    t1 = max(m[-1][1] for m in merged.values())
    if t1 <= t0:
        raise ValueError("the run's span is not positive")
    busy = sum(e - s for m in merged.values() for s, e in m)
    return 1.0 - busy / (len(merged) * (t1 - t0))
