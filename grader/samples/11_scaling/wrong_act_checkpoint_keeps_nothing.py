"""activation_bytes that believes checkpointing keeps nothing at all (it keeps each block's
input, to recompute the block in backward)."""

# fails: test_activation_bytes
# fails-on-gpu: test_activation_bytes_cuda
# %% activation_bytes
import torch


def activation_bytes(batch, d_model, n_blocks, *, dtype=torch.float32, checkpoint=False):
    if checkpoint:
        return 0
    return n_blocks * batch * 9 * d_model * torch.empty((), dtype=dtype).element_size()
