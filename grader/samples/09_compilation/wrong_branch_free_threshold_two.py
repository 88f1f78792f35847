"""branch_free scales only when the largest magnitude is above 2 (a threshold copied from another
normalizer): a tensor whose largest magnitude is between 1 and 2 is left unscaled."""

# fails: test_branch_free
# %% branch_free
import torch


def branch_free(x):
    peak = x.abs().max()
    scaled = torch.where(peak > 2, x / peak, x)
    return torch.tanh(scaled) * 2 - scaled.mean()
