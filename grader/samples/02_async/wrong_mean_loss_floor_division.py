"""mean_loss_without_sync divides the summed loss with `//`: floor division rounds the mean loss
down to a whole number."""

# fails: test_mean_loss_without_sync, test_mean_loss_without_sync_cuda
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
    if count == 0:
        raise ValueError("no batches")
    return total // count
