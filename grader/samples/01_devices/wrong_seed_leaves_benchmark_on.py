"""seed_everything seeds every generator but leaves cudnn.benchmark on."""

# fails: test_seed_everything
# %% seed_everything
import random

import numpy as np
import torch


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.backends.cudnn.deterministic = True
