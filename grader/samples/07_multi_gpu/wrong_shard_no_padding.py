"""shard_indices never pads: when the size is not a multiple of the world size, ranks differ in length."""

# fails: test_shard_indices
# %% shard_indices
import math

import torch


def shard_indices(
    num_samples: int,
    rank: int,
    world_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    drop_last: bool = False,
) -> list[int]:
    if shuffle:
        g = torch.Generator().manual_seed(seed + epoch)
        indices = torch.randperm(num_samples, generator=g).tolist()
    else:
        indices = list(range(num_samples))
    if drop_last:
        indices = indices[: num_samples // world_size * world_size]
    return indices[rank::world_size]
