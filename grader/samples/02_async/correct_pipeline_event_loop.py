"""A correct pipeline_time written differently: plays the queue launch by launch."""


# %% pipeline_time
def pipeline_time(t1, t2, t3, n):
    if n < 1:
        raise ValueError("at least one operation")
    launched = gpu_done = 0.0
    for _ in range(n):
        launched += t1  # the frontend launches the next operation
        gpu_done = max(gpu_done, launched) + t2  # the GPU runs it when it is free and launched
    return float(n * (t1 + t2 + t3)), float(gpu_done + t3)
