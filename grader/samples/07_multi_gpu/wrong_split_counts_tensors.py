"""split_model balances the number of parameter tensors (len(list(layer.parameters()))) instead of
the number of parameters: a Linear layer counts 2 whatever its size."""

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
    sizes = [len(list(layer.parameters())) for layer in layers]
    best = None
    for cuts in itertools.combinations(range(1, len(layers)), k - 1):
        bounds = [0, *cuts, len(layers)]
        largest = max(sum(sizes[a:b]) for a, b in itertools.pairwise(bounds))
        if best is None or largest < best[0]:
            best = (largest, bounds)
    stages = [nn.Sequential(*layers[a:b]) for a, b in itertools.pairwise(best[1])]
    return SplitModel(stages, devices)
