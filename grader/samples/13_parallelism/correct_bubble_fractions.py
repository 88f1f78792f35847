"""A correct bubble_fraction written differently: exact arithmetic with fractions.Fraction,
converted to float at the end, and the checks in another order."""

# %% bubble_fraction
from fractions import Fraction


def bubble_fraction(p, m, schedule="1f1b", virtual_stages=1):
    if p < 1:
        raise ValueError("need at least one stage")
    if m < 1:
        raise ValueError("need at least one micro-batch")
    if schedule == "interleaved_1f1b":
        if virtual_stages < 1 or m % p:
            raise ValueError("interleaved: virtual_stages >= 1 and m a multiple of p")
    elif schedule in ("gpipe", "1f1b"):
        if virtual_stages != 1:
            raise ValueError("virtual_stages only with interleaved_1f1b")
    else:
        raise ValueError(f"unknown schedule: {schedule}")
    bubble = Fraction(p - 1, virtual_stages)
    return float(bubble / (m + bubble))
