"""tensor_core_violations checks only the input features/channels of each layer."""

# fails: test_tensor_core_violations
# %% tensor_core_violations
import torch
from torch import nn


def tensor_core_violations(model, dtype=torch.float16):
    multiple = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4, torch.int8: 16}.get(dtype)
    if multiple is None:
        raise ValueError(dtype)
    names = []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear) and m.in_features % multiple:
            names.append(name)
        elif isinstance(m, nn.Conv2d) and m.in_channels % multiple:
            names.append(name)
    return names
