"""pipeline_time has the right totals but accepts n < 1 (returns totals for no operations
instead of raising ValueError)."""


# fails: test_pipeline_time
# %% pipeline_time
def pipeline_time(t1, t2, t3, n):
    synchronous = n * (t1 + t2 + t3)
    asynchronous = max(n * t1 + t2 + t3, t1 + n * t2 + t3)
    return float(synchronous), float(asynchronous)
