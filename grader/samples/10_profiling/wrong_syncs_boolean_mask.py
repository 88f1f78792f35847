"""train_without_syncs keeps the losses on the device but still selects the real labels with a
boolean mask, whose output size the host must read every step."""

# fails: test_train_without_syncs, test_train_without_syncs_cuda
# %% train_without_syncs
import torch
import torch.nn.functional as F


def train_without_syncs(model, batches, optimizer):
    losses = []
    for x, y in batches:
        keep = y >= 0
        loss = F.cross_entropy(model(x)[keep], y[keep])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)
