"""seed_worker follows the old recipe that seeds NumPy's global generator (and random): the
dataset's own Generator is untouched, so every worker still draws the same numbers."""

# fails: test_seed_worker
# %% seed_worker
import random

import numpy as np
import torch


def seed_worker(worker_id: int) -> None:
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)
