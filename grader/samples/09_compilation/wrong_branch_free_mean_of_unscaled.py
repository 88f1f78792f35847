"""branch_free scales x for the tanh but subtracts the mean of the unscaled x: normalize_scores
rebinds x, so both use the scaled values."""

# fails: test_branch_free
# %% branch_free
import torch


def branch_free(x: torch.Tensor) -> torch.Tensor:
    peak = x.abs().max()
    scaled = torch.where(peak > 1.0, x / peak, x)
    return torch.tanh(scaled) * 2 - x.mean()
