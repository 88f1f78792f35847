"""branch_free still reads the peak with .item() to decide in Python: the same outputs, but the
host round-trip breaks the graph."""

# fails: test_branch_free
# %% branch_free
import torch


def branch_free(x: torch.Tensor) -> torch.Tensor:
    peak = x.abs().max()
    scale = peak.item() if peak.item() > 1.0 else 1.0
    x = x / scale
    return torch.tanh(x) * 2 - x.mean()
