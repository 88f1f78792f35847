"""A correct train_without_syncs written differently: the cross-entropy by hand, with one-hot
targets (labels clamped to a valid class) weighted by a float mask of the real labels.
F.one_hot is given num_classes, so its output size is known without reading the labels (without
it, one_hot reads labels.max() on the host)."""

# %% train_without_syncs
import torch
import torch.nn.functional as F


def train_without_syncs(model, batches, optimizer):
    losses = []
    for x, y in batches:
        logits = model(x)
        real = (y >= 0).float()
        target = F.one_hot(y.clamp(min=0), num_classes=logits.shape[-1]).float()
        per_sample = -(target * F.log_softmax(logits, dim=-1)).sum(dim=-1)
        loss = (per_sample * real).sum() / real.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)
