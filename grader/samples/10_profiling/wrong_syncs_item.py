"""train_without_syncs removes the boolean mask but still logs loss.item() every step: one
device-to-host copy and synchronization per step."""

# fails: test_train_without_syncs, test_train_without_syncs_cuda
# %% train_without_syncs
import torch
import torch.nn.functional as F


def train_without_syncs(model, batches, optimizer):
    losses = []
    for x, y in batches:
        loss = F.cross_entropy(model(x), y, ignore_index=-1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return torch.tensor(losses, device=batches[0][0].device)
