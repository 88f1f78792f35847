"""mean_loss_without_sync divides by len(batches): `batches` is any iterable, and a generator
(a DataLoader-style stream) has no len()."""

# fails: test_mean_loss_without_sync
# %% mean_loss_without_sync
import torch


def mean_loss_without_sync(model, batches, loss_fn):
    device = next(model.parameters()).device
    total = torch.zeros((), device=device)
    with torch.no_grad():
        for inputs, targets in batches:
            total += loss_fn(model(inputs), targets)
    return total / len(batches)
