"""A correct pad_linear written differently: torch.nn.functional.pad on the weight and bias."""

# %% pad_linear
import torch
import torch.nn.functional as F
from torch import nn


def pad_linear(layer: nn.Linear, multiple: int = 8) -> nn.Linear:
    out_f, in_f = layer.weight.shape
    extra_in, extra_out = -in_f % multiple, -out_f % multiple
    new = nn.Linear(
        in_f + extra_in,
        out_f + extra_out,
        bias=layer.bias is not None,
        device=layer.weight.device,
        dtype=layer.weight.dtype,
    )
    with torch.no_grad():
        new.weight.copy_(F.pad(layer.weight, (0, extra_in, 0, extra_out)))
        if layer.bias is not None:
            new.bias.copy_(F.pad(layer.bias, (0, extra_out)))
    for p in new.parameters():
        p.requires_grad = layer.weight.requires_grad
    return new
