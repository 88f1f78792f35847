"""train_without_syncs replaces the boolean mask by integer indices from torch.argwhere, thinking
integer indexing does not synchronize: but argwhere (nonzero) has an output whose size depends
on the data, so the host waits for it every step."""

# fails: test_train_without_syncs, test_train_without_syncs_cuda
# %% train_without_syncs
import torch
import torch.nn.functional as F


def train_without_syncs(model, batches, optimizer):
    losses = []
    for x, y in batches:
        keep = torch.argwhere(y >= 0).squeeze(1)
        loss = F.cross_entropy(model(x).index_select(0, keep), y.index_select(0, keep))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)
