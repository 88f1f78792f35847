"""pad_linear copies requires_grad to the new weight only: the bias of a frozen layer comes back
trainable."""

# fails: test_pad_linear
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
            new.bias.zero_()
            new.bias[: layer.out_features] = layer.bias
    new.weight.requires_grad = layer.weight.requires_grad
    return new
