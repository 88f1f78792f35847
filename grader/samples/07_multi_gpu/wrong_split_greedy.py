"""split_model fills each stage greedily until it would pass total / len(devices), then starts the
next: a fair share per device, but not the smallest largest stage when a big layer comes late."""

# fails: test_split_model
# %% split_model
import itertools

import torch
from torch import nn


class SplitModel(nn.Module):
    def __init__(self, stages, devices):
        super().__init__()
        self.devices = [torch.device(d) for d in devices]
        self.stages = nn.ModuleList(s.to(d) for s, d in zip(stages, self.devices))

    def forward(self, x):
        for stage, device in zip(self.stages, self.devices):
            x = stage(x.to(device))
        return x


def split_model(model: nn.Sequential, devices: list[str]) -> nn.Module:
    layers = list(model)
    k = len(devices)
    if k == 0 or len(layers) < k:
        raise ValueError("fewer layers than devices")
    sizes = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    share = sum(sizes) / k
    stages, current, load = [], [], 0
    for i, (layer, size) in enumerate(zip(layers, sizes)):
        left = len(layers) - i  # layers not placed yet, this one included
        must_cut = k - len(stages) - 1 >= left  # every later stage needs a layer
        if current and len(stages) < k - 1 and (load + size > share or must_cut):
            stages.append(current)
            current, load = [], 0
        current.append(layer)
        load += size
    stages.append(current)
    return SplitModel([nn.Sequential(*s) for s in stages], devices)
