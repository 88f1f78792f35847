"""A correct training_memory_bytes written differently: de-duplicates shared tensors by id itself."""


# %% training_memory_bytes
def training_memory_bytes(model, optimizer: str = "adam") -> dict[str, int]:
    factor = dict(sgd=0, sgd_momentum=1, adam=2, adamw=2).get(optimizer)
    if factor is None:
        raise ValueError(f"optimizer must be sgd, sgd_momentum, adam or adamw, not {optimizer!r}")
    seen, parameters, gradients = set(), 0, 0
    for _, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            continue
        seen.add(id(p))
        size = p.nelement() * p.element_size()
        parameters += size
        gradients += size if p.requires_grad else 0
    result = {
        "parameters": parameters,
        "gradients": gradients,
        "optimizer_state": factor * gradients,
    }
    result["total"] = sum(result.values())
    return result
