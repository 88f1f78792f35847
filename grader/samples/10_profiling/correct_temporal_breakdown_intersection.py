"""A correct temporal_breakdown written differently: the merged intervals of the compute kernels
and of the other GPU events (communication, copies, memsets) separately; non-compute time is the
other events' union minus its intersection with the compute union, and busy the sum of both."""


# %% temporal_breakdown
def _merged(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def _intersection(a, b):
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def temporal_breakdown(events):
    compute, other = [], []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            interval = (e["ts"], e["ts"] + e["dur"])
            is_compute = e["cat"] == "kernel" and "nccl" not in e["name"].lower()
            (compute if is_compute else other).append(interval)
    if not compute and not other:
        raise ValueError("no GPU events (kernel, gpu_memcpy, gpu_memset)")
    ends = [end for _, end in compute + other]
    starts = [start for start, _ in compute + other]
    span = float(max(ends) - min(starts))
    compute_m, other_m = _merged(compute), _merged(other)
    compute_us = float(sum(end - start for start, end in compute_m))
    non_compute = float(sum(end - start for start, end in other_m)) - _intersection(
        compute_m, other_m
    )
    busy = compute_us + non_compute
    return {
        "span_us": span,
        "busy_us": busy,
        "idle_us": span - busy,
        "compute_us": compute_us,
        "non_compute_us": non_compute,
    }
