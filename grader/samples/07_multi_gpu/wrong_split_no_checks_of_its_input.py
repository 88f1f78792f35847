"""split_model never checks its input: with fewer layers than devices no split exists and it
raises TypeError (subscripting None), where the statement asks for ValueError. (With no device,
itertools.combinations(..., -1) happens to raise ValueError.)"""

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
    sizes = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    best = None
    for cuts in itertools.combinations(range(1, len(layers)), k - 1):
        bounds = [0, *cuts, len(layers)]
        largest = max(sum(sizes[a:b]) for a, b in itertools.pairwise(bounds))
        if best is None or largest < best[0]:
            best = (largest, bounds)
    stages = [nn.Sequential(*layers[a:b]) for a, b in itertools.pairwise(best[1])]
    return SplitModel(stages, devices)
