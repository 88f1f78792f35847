"""temporal_breakdown returns zeros for a trace without GPU events (a CPU-only profile, or the
GPU activity left out of the profiler's activities) instead of raising ValueError: a breakdown
of nothing reads as a GPU that was never idle."""


# fails: test_temporal_breakdown
# %% temporal_breakdown
def _union(intervals):
    total, run = 0.0, None
    for start, end in sorted(intervals):
        if run is None or start > run[1]:
            total += run[1] - run[0] if run else 0.0
            run = [start, end]
        else:
            run[1] = max(run[1], end)
    return total + (run[1] - run[0] if run else 0.0)


def temporal_breakdown(events):
    gpu = [
        e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    if not gpu:
        return dict.fromkeys(["span_us", "busy_us", "idle_us", "compute_us", "non_compute_us"], 0.0)
    span = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)
    busy = _union([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    compute = _union(
        [
            (e["ts"], e["ts"] + e["dur"])
            for e in gpu
            if e["cat"] == "kernel" and "nccl" not in e["name"].lower()
        ]
    )
    return {
        "span_us": float(span),
        "busy_us": busy,
        "idle_us": span - busy,
        "compute_us": compute,
        "non_compute_us": busy - compute,
    }
