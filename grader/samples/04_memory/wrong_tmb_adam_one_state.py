"""training_memory_bytes gives Adam one state per parameter instead of two."""


# fails: test_training_memory_bytes, test_training_memory_bytes_cuda
# %% training_memory_bytes
def training_memory_bytes(model, optimizer="adam"):
    states = {"sgd": 0, "sgd_momentum": 1, "adam": 1, "adamw": 1}
    if optimizer not in states:
        raise ValueError(optimizer)
    params = list(model.parameters())
    parameters = sum(p.numel() * p.element_size() for p in params)
    gradients = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    state = states[optimizer] * gradients
    return {
        "parameters": parameters,
        "gradients": gradients,
        "optimizer_state": state,
        "total": parameters + gradients + state,
    }
