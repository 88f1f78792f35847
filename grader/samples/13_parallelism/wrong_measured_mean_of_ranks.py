"""measured_bubble that averages per-rank bubble fractions, each over that rank's own span."""


# fails: test_measured_bubble
# %% measured_bubble
def measured_bubble(timelines):
    fractions = []
    for intervals in timelines.values():
        busy, covered_to = 0.0, float("-inf")
        for start, end in sorted(intervals):
            if end > covered_to:
                busy += end - max(start, covered_to)
                covered_to = end
        span = max(e for _, e in intervals) - min(s for s, _ in intervals)
        fractions.append(1.0 - busy / span)
    return sum(fractions) / len(fractions)
