"""A correct pipeline_time written differently: the larger of the frontend and backend bounds."""


# %% pipeline_time
def pipeline_time(t1: float, t2: float, t3: float, n: int) -> tuple[float, float]:
    if n < 1:
        raise ValueError("n must be >= 1")
    frontend_bound = n * t1 + t2 + t3  # the last launch ends at n*t1
    backend_bound = t1 + n * t2 + t3  # the GPU never idles after the first launch
    return (n * (t1 + t2 + t3), max(frontend_bound, backend_bound))
