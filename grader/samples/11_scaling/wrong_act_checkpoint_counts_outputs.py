"""activation_bytes that counts, for a checkpointed block, its input and its output: the
output of one block is the next block's input, stored once, and the last block's output is
not saved for backward at all."""

# fails: test_activation_bytes
# fails-on-gpu: test_activation_bytes_cuda
# %% activation_bytes
import torch


def activation_bytes(batch, d_model, n_blocks, *, dtype=torch.float32, checkpoint=False):
    size = torch.empty((), dtype=dtype).element_size()
    per_block = 2 * d_model if checkpoint else 9 * d_model
    return n_blocks * batch * per_block * size
