"""temporal_breakdown merges intervals starting from the first one, intervals[0]: with no compute
kernel (a trace of copies and an all-reduce only) the list is empty and it raises IndexError,
where compute_us is 0."""

# fails: test_temporal_breakdown
# %% temporal_breakdown


def temporal_breakdown(events):
    gpu = [
        e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    if not gpu:
        raise ValueError("no GPU event in the trace")

    def union(intervals):
        intervals = sorted(intervals)
        total, (start, end) = 0.0, intervals[0]
        for s, e in intervals[1:]:
            if s > end:
                total += end - start
                start, end = s, e
            else:
                end = max(end, e)
        return total + end - start

    spans = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu]
    compute = [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in gpu
        if e["cat"] == "kernel" and "nccl" not in e.get("name", "").lower()
    ]
    span = max(e for _, e in spans) - min(s for s, _ in spans)
    busy, compute_us = union(spans), union(compute)
    return {
        "span_us": span,
        "busy_us": busy,
        "idle_us": span - busy,
        "compute_us": compute_us,
        "non_compute_us": busy - compute_us,
    }
