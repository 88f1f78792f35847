"""training_memory_bytes skips the gradients of frozen parameters but still gives them optimizer
state (the optimizer keeps state only for parameters that get gradients)."""

# fails: test_training_memory_bytes


# %% training_memory_bytes
def training_memory_bytes(model, optimizer="adam"):
    states = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}
    if optimizer not in states:
        raise ValueError(optimizer)
    params = list(model.parameters())
    parameters = sum(p.numel() * p.element_size() for p in params)
    gradients = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    state = states[optimizer] * parameters
    return {
        "parameters": parameters,
        "gradients": gradients,
        "optimizer_state": state,
        "total": parameters + gradients + state,
    }
