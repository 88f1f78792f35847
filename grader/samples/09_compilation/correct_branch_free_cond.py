"""A correct branch_free written differently: torch.cond, which dynamo captures as one graph with
both branches inside."""

# %% branch_free
import torch


def branch_free(x: torch.Tensor) -> torch.Tensor:
    peak = x.abs().max()
    x = torch.cond(peak > 1.0, lambda t, p: t / p, lambda t, p: t.clone(), (x, peak))
    return torch.tanh(x) * 2 - x.mean()
