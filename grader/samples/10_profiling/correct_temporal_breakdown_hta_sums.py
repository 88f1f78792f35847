"""A correct temporal_breakdown written as Holistic Trace Analysis writes it (hta/utils/utils.py,
merge_kernel_intervals): sort by start, start a new group where an interval begins after every
earlier end (a running maximum), and take the sum of the groups' ends minus the sum of their
starts. At timestamps of 1.7e15 us that sum loses float64 precision; the check allows for it."""

# %% temporal_breakdown
import itertools


def _union(intervals):
    groups = []
    reach = None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            groups.append([start, end])
        else:
            groups[-1][1] = max(groups[-1][1], end)
        reach = end if reach is None else max(reach, end)
    return sum(float(end) for _, end in groups) - sum(float(start) for start, _ in groups)


def temporal_breakdown(events):
    gpu = [
        e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in {"kernel", "gpu_memcpy", "gpu_memset"}
    ]
    if not gpu:
        raise ValueError("no GPU events in the trace")
    kernels = {e["cat"] == "kernel" and "nccl" not in e["name"].lower(): [] for e in gpu}
    for key, group in itertools.groupby(
        sorted(gpu, key=lambda e: e["cat"] == "kernel" and "nccl" not in e["name"].lower()),
        key=lambda e: e["cat"] == "kernel" and "nccl" not in e["name"].lower(),
    ):
        kernels[key] = [(e["ts"], e["ts"] + e["dur"]) for e in group]
    every = kernels.get(True, []) + kernels.get(False, [])
    span = float(max(end for _, end in every) - min(start for start, _ in every))
    busy = _union(every)
    compute = _union(kernels.get(True, []))
    return {
        "span_us": span,
        "busy_us": busy,
        "idle_us": span - busy,
        "compute_us": compute,
        "non_compute_us": busy - compute,
    }
