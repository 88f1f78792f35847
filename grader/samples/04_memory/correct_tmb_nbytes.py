"""A correct training_memory_bytes written differently: Tensor.nbytes, shared parameters
recognised by their storage's address, and a loop over the modules' own parameters."""


# %% training_memory_bytes
def training_memory_bytes(model, optimizer="adam"):
    states = {"sgd": 0, "sgd_momentum": 1, "adam": 2, "adamw": 2}
    if optimizer not in states:
        raise ValueError(f"unknown optimizer {optimizer!r}")
    seen = set()
    parameters = gradients = 0
    for module in model.modules():
        for p in module.parameters(recurse=False):
            key = (p.data_ptr(), p.dtype, tuple(p.shape))
            if key in seen:
                continue
            seen.add(key)
            parameters += p.nbytes
            if p.requires_grad:
                gradients += p.nbytes
    state = states[optimizer] * gradients
    return {
        "parameters": parameters,
        "gradients": gradients,
        "optimizer_state": state,
        "total": parameters + gradients + state,
    }
