"""temporal_breakdown assumes the events come sorted by start time: it takes the span from the
first and last GPU events of the list and merges intervals in list order. A Kineto file is not
sorted (each thread and stream is written in turn), and neither is a list handed in any order."""


# fails: test_temporal_breakdown
# %% temporal_breakdown
def _union(intervals):
    total, run = 0.0, None
    for start, end in intervals:  # in list order
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
    span = gpu[-1]["ts"] + gpu[-1]["dur"] - gpu[0]["ts"]
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
