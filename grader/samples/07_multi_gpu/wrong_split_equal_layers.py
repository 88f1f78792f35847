"""split_model gives every device the same number of layers, ignoring their sizes (unbalanced)."""

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
    bounds = [round(i * len(layers) / k) for i in range(k + 1)]
    stages = [nn.Sequential(*layers[a:b]) for a, b in itertools.pairwise(bounds)]
    return SplitModel(stages, devices)
