"""measured_bubble that reads timelines[r] for r in range(len(timelines)): assumes the ranks are
numbered 0..n-1 (a pipeline's processes in a 2-D mesh are not)."""


# fails: test_measured_bubble
# %% measured_bubble
def measured_bubble(timelines):
    if not timelines or not all(timelines.values()):
        raise ValueError("each rank needs intervals")
    ranks = [timelines[r] for r in range(len(timelines))]
    first = min(s for iv in ranks for s, _ in iv)
    last = max(e for iv in ranks for _, e in iv)
    if last <= first:
        raise ValueError("span")
    busy = 0.0
    for iv in ranks:
        covered = float("-inf")
        for s, e in sorted(iv):
            if e > covered:
                busy += e - max(s, covered)
                covered = e
    return 1 - busy / (len(ranks) * (last - first))
