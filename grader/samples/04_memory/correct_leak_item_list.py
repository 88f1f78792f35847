"""A correct train_without_leak written differently: a list of Python floats from .item()."""

# %% train_without_leak
import statistics


def train_without_leak(model, batches, loss_fn, optimizer):
    losses = []
    for inputs, targets in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return statistics.fmean(losses)
