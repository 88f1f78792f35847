"""pad_linear zeroes the padding of the weight but not of the bias: the extra outputs are the new
layer's random initial bias values, not 0."""

# fails: test_pad_linear, test_pad_linear_cuda
# %% pad_linear
import math

import torch
from torch import nn


def pad_linear(layer, multiple=8):
    i = math.ceil(layer.in_features / multiple) * multiple
    o = math.ceil(layer.out_features / multiple) * multiple
    new = nn.Linear(
        i, o, bias=layer.bias is not None, device=layer.weight.device, dtype=layer.weight.dtype
    )
    with torch.no_grad():
        new.weight.zero_()
        new.weight[: layer.out_features, : layer.in_features] = layer.weight
        if layer.bias is not None:
            new.bias[: layer.out_features] = layer.bias
    new.requires_grad_(layer.weight.requires_grad)
    return new
