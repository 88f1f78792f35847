"""A correct train_without_leak: the seed's loop with loss.detach() and one .item() at the end."""


# %% train_without_leak
def train_without_leak(model, batches, loss_fn, optimizer):
    total, count = 0.0, 0
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.detach()
        count += 1
    return (total / count).item()
