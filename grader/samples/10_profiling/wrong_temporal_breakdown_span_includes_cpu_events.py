"""temporal_breakdown measures the span over every complete event of the trace, host operators
and runtime calls included: the span (and idle time) starts with the first host event, before
any GPU work."""


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
        raise ValueError("no GPU events")
    spanned = [e for e in events if e.get("ph") == "X" and "dur" in e]
    span = max(e["ts"] + e["dur"] for e in spanned) - min(e["ts"] for e in spanned)
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
