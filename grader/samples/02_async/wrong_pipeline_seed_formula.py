"""pipeline_time uses the seed's t1 + n*t2 + t3 for the asynchronous total, even when launch-bound."""


# fails: test_pipeline_time
# %% pipeline_time
def pipeline_time(t1, t2, t3, n):
    return float(n * (t1 + t2 + t3)), float(t1 + n * t2 + t3)
