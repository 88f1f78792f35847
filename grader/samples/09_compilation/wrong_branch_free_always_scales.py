"""branch_free divides by the peak unconditionally: one graph, but inputs already inside [-1, 1]
get stretched (and zeros become NaN)."""

# fails: test_branch_free
# %% branch_free
import torch


def branch_free(x: torch.Tensor) -> torch.Tensor:
    x = x / x.abs().max()
    return torch.tanh(x) * 2 - x.mean()
