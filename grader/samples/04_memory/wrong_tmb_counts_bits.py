"""training_memory_bytes sizes each element with torch.finfo(dtype).bits: that counts bits, 8 times
the bytes."""

# fails: test_training_memory_bytes, test_training_memory_bytes_cuda
# %% training_memory_bytes
import torch


def training_memory_bytes(model, optimizer="adam"):
    states = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}
    if optimizer not in states:
        raise ValueError(optimizer)
    params = list(model.parameters())
    parameters = sum(p.numel() * torch.finfo(p.dtype).bits for p in params)
    gradients = sum(p.numel() * torch.finfo(p.dtype).bits for p in params if p.requires_grad)
    state = states[optimizer] * gradients
    return {
        "parameters": parameters,
        "gradients": gradients,
        "optimizer_state": state,
        "total": parameters + gradients + state,
    }
