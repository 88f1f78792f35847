"""split_model brings the output back to the first device (the DataParallel habit of gathering on
GPU 0) instead of leaving it on the last stage's device."""

# fails: test_split_model
# fails-on-gpu: test_split_model_cuda
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
        return x.to(self.devices[0])


def split_model(model: nn.Sequential, devices: list[str]) -> nn.Module:
    layers = list(model)
    sizes = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    best = None
    for cuts in itertools.combinations(range(1, len(layers)), len(devices) - 1):
        bounds = [0, *cuts, len(layers)]
        largest = max(sum(sizes[a:b]) for a, b in itertools.pairwise(bounds))
        if best is None or largest < best[0]:
            best = (largest, bounds)
    stages = [nn.Sequential(*layers[a:b]) for a, b in itertools.pairwise(best[1])]
    return SplitModel(stages, devices)
