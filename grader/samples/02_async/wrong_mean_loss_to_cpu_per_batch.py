"""mean_loss_without_sync moves each batch's loss to the CPU with .to("cpu") (a blocking
device-to-host copy per batch), then moves the mean back to the model's device."""

# fails: test_mean_loss_without_sync, test_mean_loss_without_sync_cuda
# %% mean_loss_without_sync
import torch


def mean_loss_without_sync(model, batches, loss_fn):
    device = next(model.parameters()).device
    losses = []
    with torch.no_grad():
        for inputs, targets in batches:
            losses.append(loss_fn(model(inputs), targets).to("cpu"))
    return torch.stack(losses).mean().to(device)
