"""A correct activation_bytes written differently: counts the saved tensors one by one per
block, with dtype.itemsize for the element size."""

# %% activation_bytes
import torch


def activation_bytes(batch, d_model, n_blocks, *, dtype=torch.float32, checkpoint=False):
    total = 0
    for _ in range(n_blocks):
        saved = [batch * d_model]  # the block input, kept by the first Linear or the checkpoint
        if not checkpoint:
            saved += [batch * 4 * d_model, batch * 4 * d_model]  # GELU input, second Linear input
        total += sum(saved) * dtype.itemsize
    return int(total)
