"""training_memory_bytes counts Adam's states in fp32 (4 bytes) for every parameter, as in
mixed-precision training with fp32 master copies: torch.optim keeps its state in the
parameter's own dtype."""

# fails: test_training_memory_bytes


# %% training_memory_bytes
def training_memory_bytes(model, optimizer="adam"):
    states = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}
    if optimizer not in states:
        raise ValueError(optimizer)
    params = list(model.parameters())
    parameters = sum(p.numel() * p.element_size() for p in params)
    gradients = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    state = states[optimizer] * sum(4 * p.numel() for p in params if p.requires_grad)
    return {
        "parameters": parameters,
        "gradients": gradients,
        "optimizer_state": state,
        "total": parameters + gradients + state,
    }
