"""seed_worker gives each worker a generator seeded from fresh OS entropy: workers differ, but
no run can be reproduced."""

# fails: test_seed_worker
# %% seed_worker
import numpy as np
from torch.utils.data import get_worker_info


def seed_worker(worker_id: int) -> None:
    get_worker_info().dataset.rng = np.random.default_rng()
