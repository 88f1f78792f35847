"""branch_free compares x.max() instead of x.abs().max(): wrong whenever the largest magnitude is
a negative value."""

# fails: test_branch_free
# %% branch_free
import torch


def branch_free(x: torch.Tensor) -> torch.Tensor:
    peak = x.max()
    x = torch.where(peak > 1.0, x / peak, x)
    return torch.tanh(x) * 2 - x.mean()
