"""pad_linear builds the new layer with nn.Linear's default dtype (float32) and copies the values
in: a bf16 layer comes back in float32."""

# fails: test_pad_linear, test_pad_linear_cuda
# %% pad_linear
import math

import torch
from torch import nn


def pad_linear(layer, multiple=8):
    i = math.ceil(layer.in_features / multiple) * multiple
    o = math.ceil(layer.out_features / multiple) * multiple
    new = nn.Linear(i, o, bias=layer.bias is not None, device=layer.weight.device)
    with torch.no_grad():
        new.weight.zero_()
        new.weight[: layer.out_features, : layer.in_features] = layer.weight
        if layer.bias is not None:
            new.bias.zero_()
            new.bias[: layer.out_features] = layer.bias
    new.requires_grad_(layer.weight.requires_grad)
    return new
