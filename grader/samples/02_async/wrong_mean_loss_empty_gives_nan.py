"""mean_loss_without_sync never checks for an empty `batches`: 0 / 0 returns a NaN tensor instead
of raising ValueError as the docstring asks."""

# fails: test_mean_loss_without_sync
# %% mean_loss_without_sync
import torch


def mean_loss_without_sync(model, batches, loss_fn):
    device = next(model.parameters()).device
    total = torch.zeros((), device=device)
    count = 0
    with torch.no_grad():
        for inputs, targets in batches:
            total += loss_fn(model(inputs), targets)
            count += 1
    return total / count
