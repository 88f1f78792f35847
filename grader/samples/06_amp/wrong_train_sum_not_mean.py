"""train_amp returns the sum of the batch losses of each epoch, not their mean."""

# fails: test_train_amp
# fails-on-gpu: test_train_amp_cuda
# ruff: noqa: F821 - amp_train_step is defined by the notebook's earlier cell
# %% train_amp
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
        total = 0.0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            total += amp_train_step(
                model, x, y, loss_fn, optimizer, scaler, device_type=device.type, dtype=dtype
            ).item()
        means.append(total)
    return means
