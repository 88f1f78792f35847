"""train_amp's validation averages the batches' mean losses and accuracies: with a short last
batch (70 samples in batches of 20) that weighs the last 10 samples twice as much as the others,
so the printed loss and accuracy are not the validation set's."""

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
        total = torch.zeros((), device=device)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            total += amp_train_step(
                model, x, y, loss_fn, optimizer, scaler, device_type=device.type, dtype=dtype
            ).float()
        means.append(float(total / len(loader)))
        if val_loader is not None:
            model.eval()
            losses, accuracies = [], []
            with torch.inference_mode(), torch.autocast(device.type, dtype=dtype):
                for x, y in val_loader:
                    x, y = x.to(device), y.to(device)
                    logits = model(x)
                    losses.append(float(loss_fn(logits, y)))
                    accuracies.append(float((logits.argmax(1) == y).float().mean()))
            print(
                f"epoch {epoch + 1}: val loss {sum(losses) / len(losses):.4f}, "
                f"accuracy {sum(accuracies) / len(accuracies):.1%}"
            )
    return means
