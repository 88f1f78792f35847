"""activation_bytes that assumes 4 bytes per number whatever the dtype."""

# fails: test_activation_bytes
# fails-on-gpu: test_activation_bytes_cuda
# %% activation_bytes
import torch


def activation_bytes(batch, d_model, n_blocks, *, dtype=torch.float32, checkpoint=False):
    per_block = d_model if checkpoint else 9 * d_model
    return n_blocks * batch * per_block * 4
