"""A correct measured_bubble written differently: a sweep over start (+1) and end (-1) events of
each rank, adding the time during which at least one interval is open."""


# %% measured_bubble
def measured_bubble(timelines: dict[int, list[tuple[float, float]]]) -> float:
    if not timelines or not all(timelines.values()):
        raise ValueError("each rank needs intervals")
    every = [t for intervals in timelines.values() for iv in intervals for t in iv]
    span = max(every) - min(every)
    if span <= 0:
        raise ValueError("empty run")
    busy = 0.0
    for intervals in timelines.values():
        events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
        open_count, since = 0, None
        for t, step in events:
            if open_count == 0 and step == 1:
                since = t
            open_count += step
            if open_count == 0:
                busy += t - since
    return 1 - busy / (len(timelines) * span)
