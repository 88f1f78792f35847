"""activation_bytes that counts only the Linear layers' inputs and forgets that GELU saves its
own input (5 * d numbers per row and block instead of 9 * d)."""

# fails: test_activation_bytes
# fails-on-gpu: test_activation_bytes_cuda
# %% activation_bytes
import torch


def activation_bytes(batch, d_model, n_blocks, *, dtype=torch.float32, checkpoint=False):
    size = torch.empty((), dtype=dtype).element_size()
    per_block = d_model if checkpoint else 5 * d_model
    return n_blocks * batch * per_block * size
