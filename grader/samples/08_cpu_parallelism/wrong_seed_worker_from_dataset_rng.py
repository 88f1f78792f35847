"""seed_worker draws the worker's seed from the dataset's own generator plus the worker id:
workers differ and runs repeat, but the loader's seed is never used, so another seed (or the
next epoch) draws the same numbers again."""

# fails: test_seed_worker
# %% seed_worker
import numpy as np
from torch.utils.data import get_worker_info


def seed_worker(worker_id: int) -> None:
    dataset = get_worker_info().dataset
    dataset.rng = np.random.default_rng(int(dataset.rng.integers(2**32)) + worker_id)
