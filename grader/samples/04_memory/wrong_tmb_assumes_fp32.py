"""training_memory_bytes counts 4 bytes per element whatever the dtype: right for fp32 models only
(an fp16 or bf16 layer is counted twice its size)."""

# fails: test_training_memory_bytes


# %% training_memory_bytes
def training_memory_bytes(model, optimizer="adam"):
    states = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}
    if optimizer not in states:
        raise ValueError(optimizer)
    params = list(model.parameters())
    parameters = sum(4 * p.numel() for p in params)
    gradients = sum(4 * p.numel() for p in params if p.requires_grad)
    state = states[optimizer] * gradients
    return {
        "parameters": parameters,
        "gradients": gradients,
        "optimizer_state": state,
        "total": parameters + gradients + state,
    }
