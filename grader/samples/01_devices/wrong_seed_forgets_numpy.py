"""seed_everything seeds random and torch but forgets NumPy."""

# fails: test_seed_everything
# %% seed_everything
import random

import torch


def seed_everything(seed):
    random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
