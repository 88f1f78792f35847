"""mean_loss_without_sync prints each batch's loss inside the loop."""

# fails: test_mean_loss_without_sync, test_mean_loss_without_sync_cuda
# %% mean_loss_without_sync
import torch


def mean_loss_without_sync(model, batches, loss_fn):
    device = next(model.parameters()).device
    total, count = torch.zeros((), device=device), 0
    with torch.no_grad():
        for inputs, targets in batches:
            loss = loss_fn(model(inputs), targets)
            print("batch loss:", loss)
            total += loss
            count += 1
    return total / count
