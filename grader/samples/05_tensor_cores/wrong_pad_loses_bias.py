"""pad_linear builds the new layer without a bias."""

# fails: test_pad_linear, test_pad_linear_cuda
# %% pad_linear
import math

import torch
from torch import nn


def pad_linear(layer, multiple=8):
    i = math.ceil(layer.in_features / multiple) * multiple
    o = math.ceil(layer.out_features / multiple) * multiple
    new = nn.Linear(i, o, bias=False, device=layer.weight.device, dtype=layer.weight.dtype)
    with torch.no_grad():
        new.weight.zero_()
        new.weight[: layer.out_features, : layer.in_features] = layer.weight
    new.requires_grad_(layer.weight.requires_grad)
    return new
