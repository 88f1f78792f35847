"""average_gradients averages with floor division (p.grad //= world_size): every averaged
gradient is rounded down to a whole number."""

# fails: test_average_gradients
# %% average_gradients
import torch.distributed as dist


def average_gradients(model):
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad //= world_size
