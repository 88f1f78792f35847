"""ShardedOptimizer that updates its own shard and never sends the updated parameters to the
other ranks: each rank's copy of the others' shards stays at its initial value."""

# fails: test_sharded_optimizer
# %% sharded_optimizer
import torch.distributed as dist


class ShardedOptimizer:
    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = list(params)
        rank, world = dist.get_rank(), dist.get_world_size()
        load = [0] * world
        mine = []
        for p in sorted(self.params, key=lambda q: -q.numel()):
            owner = load.index(min(load))
            load[owner] += p.numel()
            if owner == rank:
                mine.append(p)
        self.optimizer = optimizer_cls(mine, **kwargs)

    def step(self) -> None:
        self.optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None
