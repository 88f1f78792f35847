"""zero_memory_bytes that gives each rank ceil(num_params / world_size) parameters of every
sharded part, as a padded flat shard would hold: right whenever the world size divides the
count, more otherwise (the exercise asks for the exact quotient)."""

# fails: test_zero_memory_bytes
# %% zero_memory_bytes
import math


def zero_memory_bytes(num_params, world_size, stage):
    if stage not in (0, 1, 2, 3):
        raise ValueError(stage)
    shard = math.ceil(num_params / world_size)
    params = 2 * (shard if stage >= 3 else num_params)
    grads = 2 * (shard if stage >= 2 else num_params)
    optim = 12 * (shard if stage >= 1 else num_params)
    return float(params + grads + optim)
