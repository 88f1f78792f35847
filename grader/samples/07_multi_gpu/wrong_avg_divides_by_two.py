"""average_gradients divides by a hard-coded 2 (the notebook's world size) instead of
dist.get_world_size(): right for 2 processes only."""

# fails: test_average_gradients
# %% average_gradients
import torch.distributed as dist


def average_gradients(model):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= 2
