"""train_without_syncs computes the cross-entropy by hand with F.one_hot(labels) but leaves out
num_classes: one_hot then reads labels.max() on the host to size its output, a synchronization
every step (slicing the log-probabilities to its width keeps the values right)."""

# fails: test_train_without_syncs, test_train_without_syncs_cuda
# %% train_without_syncs
import torch
import torch.nn.functional as F


def train_without_syncs(model, batches, optimizer):
    losses = []
    for x, y in batches:
        logits = model(x)
        real = (y >= 0).float()
        target = F.one_hot(y.clamp(min=0)).float()
        width = target.shape[-1]
        log_p = F.log_softmax(logits, dim=-1)[:, :width]
        per_sample = -(target * log_p).sum(dim=-1)
        loss = (per_sample * real).sum() / real.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)
