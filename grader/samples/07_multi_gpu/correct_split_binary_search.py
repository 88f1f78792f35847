"""A correct split_model written differently: binary search on the largest stage with a greedy
fill, stages kept as plain lists of layers, and activations moved with a pre-hook per stage."""

# %% split_model
import torch
from torch import nn


def _greedy(sizes, limit):
    stages, current, total = [], [], 0
    for i, s in enumerate(sizes):
        if current and total + s > limit:
            stages.append(current)
            current, total = [], 0
        current.append(i)
        total += s
    stages.append(current)
    return stages


def split_model(model: nn.Sequential, devices: list[str]) -> nn.Module:
    layers = list(model)
    if not devices or len(layers) < len(devices):
        raise ValueError("need at least one layer per device")
    sizes = [sum(p.numel() for p in m.parameters()) for m in layers]
    lo, hi = max(sizes), sum(sizes)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(_greedy(sizes, mid)) <= len(devices):
            hi = mid
        else:
            lo = mid + 1
    groups = _greedy(sizes, lo)
    while len(groups) < len(devices):  # split the longest group: the largest stage cannot grow
        i = max(range(len(groups)), key=lambda j: len(groups[j]))
        groups[i : i + 1] = [groups[i][:1], groups[i][1:]]
    out = nn.Sequential()
    for group, device in zip(groups, devices):
        stage = nn.Sequential(*[layers[i] for i in group]).to(device)

        def move(module, args, device=torch.device(device)):
            return tuple(a.to(device) for a in args)

        stage.register_forward_pre_hook(move)
        out.append(stage)
    return out
