"""shard_indices sizes each rank's share with round(num_samples / world_size) instead of
rounding up: 10 samples over 3 ranks give 3 each (9, one sample dropped), not 4 (12, padded)."""

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
        total = num_samples // world_size * world_size
    else:
        total = round(num_samples / world_size) * world_size
    while len(indices) < total:
        indices += indices[: total - len(indices)]
    return indices[rank:total:world_size]
