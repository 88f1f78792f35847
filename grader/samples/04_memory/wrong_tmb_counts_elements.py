"""training_memory_bytes counts elements (numel) instead of bytes."""


# fails: test_training_memory_bytes, test_training_memory_bytes_cuda
# %% training_memory_bytes
def training_memory_bytes(model, optimizer="adam"):
    states = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}
    if optimizer not in states:
        raise ValueError(optimizer)
    params = list(model.parameters())
    parameters = sum(p.numel() for p in params)
    gradients = sum(p.numel() for p in params if p.requires_grad)
    state = states[optimizer] * gradients
    return {
        "parameters": parameters,
        "gradients": gradients,
        "optimizer_state": state,
        "total": parameters + gradients + state,
    }
