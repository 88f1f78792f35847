"""A correct temporal_breakdown written differently: a sweep over the sorted endpoints, counting
the GPU events (and the compute kernels) running at each instant; busy is the time with at least
one running, compute the time with at least one compute kernel running."""


# %% temporal_breakdown
def temporal_breakdown(events):
    points = []  # (time, change in running events, change in running compute kernels)
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        start, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        compute = int(e["cat"] == "kernel" and "nccl" not in e.get("name", "").lower())
        points += [(start, 1, compute), (end, -1, -compute)]
    if not points:
        raise ValueError("no kernel, gpu_memcpy or gpu_memset event in these events")
    points.sort()
    busy = compute_time = 0.0
    running = running_compute = 0
    previous = points[0][0]
    for time, change, compute_change in points:
        if running > 0:
            busy += time - previous
        if running_compute > 0:
            compute_time += time - previous
        running += change
        running_compute += compute_change
        previous = time
    span = points[-1][0] - points[0][0]
    return {
        "span_us": span,
        "busy_us": busy,
        "idle_us": span - busy,
        "compute_us": compute_time,
        "non_compute_us": busy - compute_time,
    }
