"""training_memory_bytes counts buffers (BatchNorm running statistics) as parameters."""


# fails: test_training_memory_bytes
# %% training_memory_bytes
def training_memory_bytes(model, optimizer="adam"):
    states = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}
    if optimizer not in states:
        raise ValueError(optimizer)
    tensors = list(model.parameters()) + list(model.buffers())
    parameters = sum(t.numel() * t.element_size() for t in tensors)
    gradients = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    state = states[optimizer] * gradients
    return {
        "parameters": parameters,
        "gradients": gradients,
        "optimizer_state": state,
        "total": parameters + gradients + state,
    }
