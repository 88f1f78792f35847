"""tensor_core_violations uses a multiple of 8 for every dtype."""

# fails: test_tensor_core_violations
# %% tensor_core_violations
import torch
from torch import nn


def tensor_core_violations(model, dtype=torch.float16):
    if dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.int8):
        raise ValueError(dtype)
    names = []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear) and (m.in_features % 8 or m.out_features % 8):
            names.append(name)
        elif isinstance(m, nn.Conv2d) and (m.in_channels % 8 or m.out_channels % 8):
            names.append(name)
    return names
