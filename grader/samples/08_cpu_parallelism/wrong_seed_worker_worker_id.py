"""seed_worker seeds the dataset's generator with the worker id alone: workers differ, but every
epoch (and every run, whatever the loader's seed) repeats the same numbers."""

# fails: test_seed_worker
# %% seed_worker
import numpy as np
from torch.utils.data import get_worker_info


def seed_worker(worker_id: int) -> None:
    get_worker_info().dataset.rng = np.random.default_rng(worker_id)
