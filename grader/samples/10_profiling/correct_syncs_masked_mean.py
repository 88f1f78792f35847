"""A correct train_without_syncs written differently: per-sample losses weighted by a float mask
(labels clamped to a valid class), summed and divided by the mask's sum, all on the device."""

# %% train_without_syncs
import torch
import torch.nn.functional as F


def train_without_syncs(model, batches, optimizer):
    out = torch.zeros(len(batches), device=batches[0][0].device)
    for i, (x, y) in enumerate(batches):
        weight = (y >= 0).float()
        per_sample = F.cross_entropy(model(x), y.clamp(min=0), reduction="none")
        loss = (per_sample * weight).sum() / weight.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        out[i] = loss.detach()
    return out
