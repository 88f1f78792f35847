"""train_amp averages with floor division (total // batches): the mean loss per epoch is rounded
down to a whole number."""

# fails: test_train_amp
# fails-on-gpu: test_train_amp_cuda
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
        total, batches = 0.0, 0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = amp_train_step(
                model, x, y, loss_fn, optimizer, scaler, device_type=device.type, dtype=dtype
            )
            total += loss.item()
            batches += 1
        means.append(total // batches)
        if val_loader is not None:
            model.eval()
            correct, seen = 0, 0
            with torch.inference_mode(), torch.autocast(device.type, dtype=dtype):
                for x, y in val_loader:
                    correct += int((model(x.to(device)).argmax(1) == y.to(device)).sum())
                    seen += len(y)
            print(f"epoch {epoch + 1}: val accuracy {correct / seen:.3f}")
    return means
