"""temporal_breakdown adds up the GPU events' durations instead of taking the union of their
intervals: a copy on one stream under a kernel on another counts twice, so busy time can exceed
the span (on the DDP trace, every all-reduce under backward's kernels counts twice)."""


# fails: test_temporal_breakdown
# %% temporal_breakdown
def temporal_breakdown(events):
    gpu = [
        e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    if not gpu:
        raise ValueError("no GPU events")
    span = max(e["ts"] + e["dur"] for e in gpu) - min(e["ts"] for e in gpu)
    busy = float(sum(e["dur"] for e in gpu))
    compute = float(
        sum(e["dur"] for e in gpu if e["cat"] == "kernel" and "nccl" not in e["name"].lower())
    )
    return {
        "span_us": float(span),
        "busy_us": busy,
        "idle_us": span - busy,
        "compute_us": compute,
        "non_compute_us": busy - compute,
    }
