"""train_without_leak detaches correctly but weights each batch's loss by its number of samples:
with a short last batch that is not the mean over batches the statement asks for."""


# fails: test_train_without_leak
# %% train_without_leak
def train_without_leak(model, batches, loss_fn, optimizer):
    total, samples = 0.0, 0
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(inputs)
        samples += len(inputs)
    return total / samples
