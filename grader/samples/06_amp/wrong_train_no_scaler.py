"""train_amp never enables the GradScaler (enabled=False for every dtype): the float16 loss is
never scaled, so gradients below float16's range would flush to zero (the check's model learns
anyway; its backward pass shows the unscaled gradients)."""

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
    scaler = torch.amp.GradScaler(device.type, enabled=False)
    means = []
    for epoch in range(epochs):
        model.train()
        total, count = 0.0, 0
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = amp_train_step(
                model, x, y, loss_fn, optimizer, scaler, device_type=device.type, dtype=dtype
            )
            total += loss.item()
            count += 1
        means.append(total / count)
        if val_loader is not None:
            model.eval()
            correct, seen, val_loss = 0, 0, 0.0
            with torch.inference_mode(), torch.autocast(device.type, dtype=dtype):
                for x, y in val_loader:
                    logits, y = model(x.to(device)), y.to(device)
                    val_loss += float(loss_fn(logits, y)) * len(y)
                    correct += int((logits.argmax(1) == y).sum())
                    seen += len(y)
            print(
                f"epoch {epoch + 1}: val loss {val_loss / seen:.4f}, accuracy {correct / seen:.3f}"
            )
    return means
