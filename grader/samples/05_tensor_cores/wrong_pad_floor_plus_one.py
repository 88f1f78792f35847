"""pad_linear rounds up with (size // multiple + 1) * multiple: a size that is already a multiple
(16 with multiple 8) grows by a whole extra multiple (to 24)."""

# fails: test_pad_linear
# %% pad_linear
import torch
from torch import nn


def pad_linear(layer, multiple=8):
    new_in = (layer.in_features // multiple + 1) * multiple
    new_out = (layer.out_features // multiple + 1) * multiple
    new = nn.Linear(
        new_in,
        new_out,
        bias=layer.bias is not None,
        device=layer.weight.device,
        dtype=layer.weight.dtype,
    )
    with torch.no_grad():
        new.weight.zero_()
        new.weight[: layer.out_features, : layer.in_features] = layer.weight
        if layer.bias is not None:
            new.bias.zero_()
            new.bias[: layer.out_features] = layer.bias
    new.requires_grad_(layer.weight.requires_grad)
    return new
