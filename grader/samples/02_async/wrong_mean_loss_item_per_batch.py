"""mean_loss_without_sync calls .item() on every batch's loss (a synchronization per batch)."""

# fails: test_mean_loss_without_sync, test_mean_loss_without_sync_cuda
# %% mean_loss_without_sync
import torch


def mean_loss_without_sync(model, batches, loss_fn):
    device = next(model.parameters()).device
    total, count = 0.0, 0
    with torch.no_grad():
        for inputs, targets in batches:
            total += loss_fn(model(inputs), targets).item()
            count += 1
    return torch.tensor(total / count, device=device)
