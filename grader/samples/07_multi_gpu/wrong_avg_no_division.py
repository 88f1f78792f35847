"""average_gradients all-reduces the gradients but never divides by the world size (a sum)."""

# fails: test_average_gradients
# %% average_gradients
import torch.distributed as dist


def average_gradients(model) -> None:
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
