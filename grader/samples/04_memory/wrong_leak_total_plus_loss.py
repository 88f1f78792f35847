"""train_without_leak keeps the seed's leak: total += loss chains every step's graph."""


# fails: test_train_without_leak
# %% train_without_leak
def train_without_leak(model, batches, loss_fn, optimizer):
    total, count = 0, 0
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss
        count += 1
    return float(total) / count
