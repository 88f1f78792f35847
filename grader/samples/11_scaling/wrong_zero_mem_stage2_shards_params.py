"""zero_memory_bytes that shards the parameters from stage 2 on (stage 2 shards optimizer state
and gradients only) and accepts any stage."""


# fails: test_zero_memory_bytes
# %% zero_memory_bytes
def zero_memory_bytes(num_params, world_size, stage):
    p, g, o = 2.0 * num_params, 2.0 * num_params, 12.0 * num_params
    if stage >= 1:
        o /= world_size
    if stage >= 2:
        g /= world_size
        p /= world_size
    return p + g + o
