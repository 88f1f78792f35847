"""A correct bubble_fraction written differently: it counts slots (one slot = one chunk's
forward and backward, 1/v of a stage's) rank by rank: busy slots, and the idle ones around them."""


# %% bubble_fraction
def bubble_fraction(p, m, schedule="1f1b", virtual_stages=1):
    if schedule not in {"gpipe", "1f1b", "interleaved_1f1b"}:
        raise ValueError("schedule must be gpipe, 1f1b or interleaved_1f1b")
    if p < 1 or m < 1 or virtual_stages < 1:
        raise ValueError("p, m and virtual_stages must be positive")
    if schedule != "interleaved_1f1b" and virtual_stages > 1:
        raise ValueError("only interleaved_1f1b has virtual stages")
    if schedule == "interleaved_1f1b" and m % p:
        raise ValueError("interleaved_1f1b needs m divisible by p")
    v = virtual_stages
    # In slots of (t_f + t_b) / v: each rank works v*m slots; the fill waits p - 1 slots.
    busy_slots = [v * m for _ in range(p)]
    total_slots = v * m + (p - 1)
    idle = sum(total_slots - b for b in busy_slots)
    return idle / (p * total_slots)
