"""zero_memory_bytes checks the stage but not the world size: with no rank at all it returns a
figure for stage 0 (and a ZeroDivisionError for the others), where the docstring asks for a
ValueError."""


# fails: test_zero_memory_bytes
# %% zero_memory_bytes
def zero_memory_bytes(num_params, world_size, stage):
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"unknown ZeRO stage {stage}")
    sharded = {0: 0, 1: 12, 2: 14, 3: 16}[stage]
    return (16 - sharded) * num_params + sharded * num_params / world_size
