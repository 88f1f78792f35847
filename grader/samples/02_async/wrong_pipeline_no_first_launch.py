"""pipeline_time's asynchronous total is n * max(t1, t2) + t3: it forgets that the first launch
(t1) or the last kernel (t2) does not overlap with anything, an off-by-one in the pipeline."""

# fails: test_pipeline_time


# %% pipeline_time
def pipeline_time(t1, t2, t3, n):
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    return float(n * (t1 + t2 + t3)), float(n * max(t1, t2) + t3)
