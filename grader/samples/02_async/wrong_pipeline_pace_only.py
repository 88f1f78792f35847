"""pipeline_time counts only the pace for the asynchronous total, n*max(t1, t2) + t3, and forgets
the first launch (or the last kernel) that the slower side cannot hide."""


# fails: test_pipeline_time
# %% pipeline_time
def pipeline_time(t1, t2, t3, n):
    if n < 1:
        raise ValueError("n must be >= 1")
    return float(n * (t1 + t2 + t3)), float(n * max(t1, t2) + t3)
