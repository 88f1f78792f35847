"""A correct average_gradients written differently: a helper function and a module-level
constant of the same cell do the work (spawned ranks on a GPU machine rebuild all three from the
cell's source)."""

# %% average_gradients
import torch.distributed as dist

SUM = dist.ReduceOp.SUM


def _mean_over_ranks(t) -> None:
    dist.all_reduce(t, op=SUM)
    t.div_(dist.get_world_size())


def average_gradients(model) -> None:
    for p in model.parameters():
        if p.grad is not None:
            _mean_over_ranks(p.grad)
