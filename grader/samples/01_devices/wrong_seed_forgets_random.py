"""seed_everything seeds NumPy and torch but forgets Python's random."""

# fails: test_seed_everything
# %% seed_everything
import numpy as np
import torch


def seed_everything(seed):
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
