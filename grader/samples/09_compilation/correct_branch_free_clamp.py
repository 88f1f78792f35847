"""A correct branch_free written differently: the branch as arithmetic, dividing by the peak
clamped to at least 1 (a division by 1 leaves x unchanged)."""

# %% branch_free
import torch


def branch_free(x: torch.Tensor) -> torch.Tensor:
    x = x / x.abs().amax().clamp(min=1.0)
    return 2 * x.tanh() - x.mean()
