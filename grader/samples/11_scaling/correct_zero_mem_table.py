"""A correct zero_memory_bytes written differently: a table of which of the three parts each
stage shards."""


# %% zero_memory_bytes
def zero_memory_bytes(num_params: int, world_size: int, stage: int) -> float:
    sharded = {0: (), 1: ("optim",), 2: ("optim", "grads"), 3: ("optim", "grads", "params")}
    if stage not in sharded or world_size <= 0:
        raise ValueError(f"ZeRO has stages 0-3 and needs a rank, not {stage}, {world_size}")
    parts = {"params": 2, "grads": 2, "optim": 12}
    return float(
        sum(b * num_params / (world_size if k in sharded[stage] else 1) for k, b in parts.items())
    )
