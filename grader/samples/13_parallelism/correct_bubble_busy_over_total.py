"""A correct bubble_fraction written differently: 1 - busy / total, with times in units of one
micro-batch's forward and backward on one stage, and a table of valid schedules."""


# %% bubble_fraction
def bubble_fraction(p: int, m: int, schedule: str = "1f1b", virtual_stages: int = 1) -> float:
    interleaved = {"gpipe": False, "1f1b": False, "interleaved_1f1b": True}
    if schedule not in interleaved:
        raise ValueError(f"no schedule called {schedule!r}")
    if min(p, m, virtual_stages) < 1:
        raise ValueError("p, m and virtual_stages are counts: at least 1 each")
    if virtual_stages != 1 and not interleaved[schedule]:
        raise ValueError(f"{schedule} has one stage a rank")
    if interleaved[schedule] and m % p != 0:
        raise ValueError(f"interleaved 1F1B runs micro-batches in groups of p={p}; m={m}")
    busy = float(m)  # each stage: m forwards and backwards
    total = m + (p - 1) / virtual_stages  # plus the fill and drain, shortened by v
    return 1.0 - busy / total
