"""zero_memory_bytes that rounds its result to a whole number of bytes (the statement says not
to round)."""


# fails: test_zero_memory_bytes
# %% zero_memory_bytes
def zero_memory_bytes(num_params, world_size, stage):
    if stage not in (0, 1, 2, 3):
        raise ValueError(stage)
    sharded = {0: 0, 1: 12, 2: 14, 3: 16}[stage]
    return round((16 - sharded) * num_params + sharded * num_params / world_size)
