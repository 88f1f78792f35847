"""A correct train_amp written differently: statistics.fmean of per-batch floats (correct values,
but a host-device sync per batch on a GPU)."""

# ruff: noqa: F821 - amp_train_step is defined by the notebook's earlier cell
# %% train_amp
import statistics

import torch
from torch import nn


def train_amp(model, loader, epochs, lr, device, dtype) -> list[float]:
    device = torch.device(device)
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    means = []
    for _ in range(epochs):
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
    return means
