"""train_without_leak appends each loss tensor to a list and averages them at the end: every
loss in the list holds its step's whole autograd graph until the function returns."""

# fails: test_train_without_leak
# %% train_without_leak
import torch


def train_without_leak(model, batches, loss_fn, optimizer):
    losses = []
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss)
    return torch.stack(losses).mean().item()
