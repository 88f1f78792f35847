"""seed_everything calls np.random.default_rng(seed), which makes a new generator and throws it
away: the global NumPy generator (np.random.rand) is never seeded."""

# fails: test_seed_everything
# %% seed_everything
import random

import numpy as np
import torch


def seed_everything(seed):
    random.seed(seed)
    np.random.default_rng(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
