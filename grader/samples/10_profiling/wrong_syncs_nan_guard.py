"""train_without_syncs skips a step when the loss is NaN with `if torch.isnan(loss):`, a
data-dependent branch that reads the loss on the host every step."""

# fails: test_train_without_syncs, test_train_without_syncs_cuda
# %% train_without_syncs
import torch
import torch.nn.functional as F


def train_without_syncs(model, batches, optimizer):
    losses = []
    for x, y in batches:
        loss = F.cross_entropy(model(x), y, ignore_index=-1)
        if torch.isnan(loss):
            continue
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)
