"""mean_loss_without_sync accumulates on the device but returns a Python float."""

# fails: test_mean_loss_without_sync, test_mean_loss_without_sync_cuda
# %% mean_loss_without_sync
import torch


def mean_loss_without_sync(model, batches, loss_fn):
    device = next(model.parameters()).device
    total, count = torch.zeros((), device=device), 0
    with torch.no_grad():
        for inputs, targets in batches:
            total += loss_fn(model(inputs), targets)
            count += 1
    return (total / count).item()
