"""train_amp validates without model.eval(): dropout and batch norm would still be in training mode."""

# fails: test_train_amp
# ruff: noqa: F821 - amp_train_step is defined by the notebook's earlier cell
# %% train_amp
import torch
from torch import nn


def train_amp(model, loader, epochs, lr, device, dtype, val_loader=None) -> list[float]:
    device = torch.device(device)
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    means = []
    for epoch in range(epochs):
        model.train()
        total = torch.zeros(())
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            total += (
                amp_train_step(
                    model, x, y, loss_fn, optimizer, scaler, device_type=device.type, dtype=dtype
                )
                .float()
                .cpu()
            )
        means.append(float(total / len(loader)))
        if val_loader is not None:
            correct = 0
            with torch.inference_mode(), torch.autocast(device.type, dtype=dtype):
                for x, y in val_loader:
                    correct += int((model(x.to(device)).argmax(1) == y.to(device)).sum())
            print(f"epoch {epoch + 1}: val accuracy {correct / len(val_loader.dataset):.3f}")
    return means
