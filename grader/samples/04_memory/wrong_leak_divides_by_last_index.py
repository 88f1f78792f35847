"""train_without_leak divides by the last index of enumerate(batches): an off-by-one, one batch
fewer than there were."""

# fails: test_train_without_leak


# %% train_without_leak
def train_without_leak(model, batches, loss_fn, optimizer):
    total = 0.0
    for i, (inputs, targets) in enumerate(batches):
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total / i
