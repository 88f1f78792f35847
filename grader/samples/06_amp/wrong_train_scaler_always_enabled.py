"""train_amp enables the GradScaler for every dtype: bfloat16 has float32's exponent range and
needs no loss scaling; the scaled gradients come out the same here, but the statement asks for a
scaler enabled only for float16 (and a scaled bfloat16 loss can overflow for nothing)."""

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
    scaler = torch.amp.GradScaler(device.type)
    means = []
    for epoch in range(epochs):
        model.train()
        total = torch.zeros((), device=device)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            total += amp_train_step(
                model, x, y, loss_fn, optimizer, scaler, device_type=device.type, dtype=dtype
            ).float()
        means.append(float(total / len(loader)))
        if val_loader is not None:
            model.eval()
            val_loss, correct, seen = torch.zeros((), device=device), 0, 0
            with torch.inference_mode(), torch.autocast(device.type, dtype=dtype):
                for x, y in val_loader:
                    x, y = x.to(device), y.to(device)
                    logits = model(x)
                    val_loss += loss_fn(logits, y).float() * len(y)
                    correct += int((logits.argmax(1) == y).sum())
                    seen += len(y)
            print(
                f"epoch {epoch + 1}: val loss {float(val_loss) / seen:.4f}, accuracy {correct / seen:.1%}"
            )
    return means
