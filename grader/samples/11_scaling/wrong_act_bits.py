"""activation_bytes that takes the element size from torch.finfo(dtype).bits: bits, not bytes,
so every answer is 8 times too large."""

# fails: test_activation_bytes
# fails-on-gpu: test_activation_bytes_cuda
# %% activation_bytes
import torch


def activation_bytes(batch, d_model, n_blocks, *, dtype=torch.float32, checkpoint=False):
    per_block = d_model if checkpoint else 9 * d_model
    return n_blocks * batch * per_block * torch.finfo(dtype).bits
