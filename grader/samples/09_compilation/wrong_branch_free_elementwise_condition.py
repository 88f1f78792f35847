"""branch_free decides element by element (torch.where(x.abs() > 1, ...)): only the elements
above 1 are divided, where normalize_scores divides the whole tensor when its largest magnitude
is above 1."""

# fails: test_branch_free
# %% branch_free
import torch


def branch_free(x: torch.Tensor) -> torch.Tensor:
    peak = x.abs().max()
    x = torch.where(x.abs() > 1.0, x / peak, x)
    return torch.tanh(x) * 2 - x.mean()
