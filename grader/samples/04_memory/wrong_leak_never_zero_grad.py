"""train_without_leak never calls optimizer.zero_grad(): each step's gradients are added to the
previous steps', so every step after the first moves the parameters too far."""

# fails: test_train_without_leak


# %% train_without_leak
def train_without_leak(model, batches, loss_fn, optimizer):
    total, count = 0.0, 0
    for inputs, targets in batches:
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        total += loss.item()
        count += 1
    return total / count
