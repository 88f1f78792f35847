"""A correct seed_worker written differently: the worker's torch seed (which the DataLoader set
to base seed + worker id) feeds a SeedSequence, mixed with the worker id."""

# %% seed_worker
import numpy as np
import torch
import torch.utils.data


def seed_worker(worker_id: int) -> None:
    dataset = torch.utils.data.get_worker_info().dataset
    sequence = np.random.SeedSequence([torch.initial_seed(), worker_id])
    dataset.rng = np.random.Generator(np.random.PCG64(sequence))
