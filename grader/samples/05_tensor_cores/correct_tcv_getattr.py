"""A correct tensor_core_violations written differently: a table of (attribute, attribute) per layer type."""

# %% tensor_core_violations
import torch
from torch import nn

RULES = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4, torch.int8: 16}
SIZES = {nn.Linear: ("in_features", "out_features"), nn.Conv2d: ("in_channels", "out_channels")}


def tensor_core_violations(model, dtype=torch.float16):
    try:
        multiple = RULES[dtype]
    except KeyError:
        raise ValueError(f"unsupported dtype {dtype}") from None
    bad = []
    for name, module in model.named_modules():
        attrs = next((a for cls, a in SIZES.items() if isinstance(module, cls)), None)
        if attrs and any(getattr(module, a) % multiple != 0 for a in attrs):
            bad.append(name)
    return bad
