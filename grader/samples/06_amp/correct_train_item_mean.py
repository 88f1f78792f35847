"""A correct train_amp written differently: statistics.fmean of per-batch floats (correct values,
but a host-device sync per batch on a GPU), and validation in a helper function under
torch.no_grad() that returns loss and accuracy."""

# ruff: noqa: F821 - amp_train_step is defined by the notebook's earlier cell
# %% train_amp
import statistics

import torch
from torch import nn


def evaluate(model, loader, loss_fn, device, dtype):
    model.eval()
    losses, hits, count = [], 0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            with torch.autocast(device_type=device.type, dtype=dtype):
                logits = model(x)
                losses.append(loss_fn(logits, y).item() * len(y))
            hits += int((logits.argmax(1) == y).sum())
            count += len(y)
    return sum(losses) / count, hits / count


def train_amp(model, loader, epochs, lr, device, dtype, val_loader=None) -> list[float]:
    device = torch.device(device)
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    means = []
    for epoch in range(epochs):
        model.train()
        batch_losses = []
        for x, y in loader:
            loss = amp_train_step(
                model,
                x.to(device),
                y.to(device),
                loss_fn,
                optimizer,
                scaler,
                device_type=device.type,
                dtype=dtype,
            )
            batch_losses.append(loss.float().item())
        means.append(statistics.fmean(batch_losses))
        if val_loader is not None:
            val_loss, accuracy = evaluate(model, val_loader, loss_fn, device, dtype)
            print(f"epoch {epoch}: validation loss {val_loss:.3f}, accuracy {accuracy:.3f}")
    return means
