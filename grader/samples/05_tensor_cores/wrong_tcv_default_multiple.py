"""tensor_core_violations looks the multiple up with dict.get(dtype, 8): a dtype without a rule
(float64) gets fp16's 8 instead of a ValueError."""

# fails: test_tensor_core_violations
# %% tensor_core_violations
import torch
from torch import nn


def tensor_core_violations(model, dtype=torch.float16):
    multiple = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4, torch.int8: 16}.get(dtype, 8)
    names = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            dims = (module.in_features, module.out_features)
        elif isinstance(module, nn.Conv2d):
            dims = (module.in_channels, module.out_channels)
        else:
            continue
        if any(d % multiple for d in dims):
            names.append(name)
    return names
