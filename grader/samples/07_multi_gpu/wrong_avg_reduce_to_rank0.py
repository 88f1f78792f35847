"""average_gradients uses dist.reduce: only rank 0 gets the sum, the other ranks keep their own."""

# fails: test_average_gradients
# %% average_gradients
import torch.distributed as dist


def average_gradients(model) -> None:
    world_size = dist.get_world_size()
    for p in model.parameters():
        if p.grad is not None:
            dist.reduce(p.grad, dst=0, op=dist.ReduceOp.SUM)
            p.grad /= world_size
