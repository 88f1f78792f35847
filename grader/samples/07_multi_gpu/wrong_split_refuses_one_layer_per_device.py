"""split_model refuses as many layers as devices (<= where < was meant): three layers on three
devices, one each, is a valid split."""

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
    if k == 0 or len(layers) <= k:
        raise ValueError(f"cannot split {len(layers)} layers over {k} devices")
    sizes = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    best = None
    for cuts in itertools.combinations(range(1, len(layers)), k - 1):
        bounds = [0, *cuts, len(layers)]
        largest = max(sum(sizes[a:b]) for a, b in itertools.pairwise(bounds))
        if best is None or largest < best[0]:
            best = (largest, bounds)
    stages = [nn.Sequential(*layers[a:b]) for a, b in itertools.pairwise(best[1])]
    return SplitModel(stages, devices)
