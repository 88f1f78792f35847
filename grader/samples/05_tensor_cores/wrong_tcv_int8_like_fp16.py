"""tensor_core_violations uses 8 for int8 as for fp16: int8 Tensor Cores need multiples of 16
(Case 1 flags the same layers either way; a layer of 24 features does not)."""

# fails: test_tensor_core_violations
# %% tensor_core_violations
import torch
from torch import nn


def tensor_core_violations(model, dtype=torch.float16):
    multiples = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4, torch.int8: 8}
    if dtype not in multiples:
        raise ValueError(f"no rule for {dtype}")
    names = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            dims = (module.in_features, module.out_features)
        elif isinstance(module, nn.Conv2d):
            dims = (module.in_channels, module.out_channels)
        else:
            continue
        if any(d % multiples[dtype] for d in dims):
            names.append(name)
    return names
