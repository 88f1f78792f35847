"""zero_memory_bytes that returns gigabytes (divides by 1e9), the unit the notebook prints,
instead of bytes."""


# fails: test_zero_memory_bytes
# %% zero_memory_bytes
def zero_memory_bytes(num_params, world_size, stage):
    if stage not in (0, 1, 2, 3):
        raise ValueError(stage)
    p, g, o = 2.0 * num_params, 2.0 * num_params, 12.0 * num_params
    if stage >= 1:
        o /= world_size
    if stage >= 2:
        g /= world_size
    if stage >= 3:
        p /= world_size
    return (p + g + o) / 1e9
