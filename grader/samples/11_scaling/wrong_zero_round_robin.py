"""ShardedOptimizer that deals the parameters out by position (round robin): rank 0 gets every
weight matrix, rank 1 every bias, so rank 0 holds almost all of the state."""

# fails: test_sharded_optimizer
# %% sharded_optimizer
import torch.distributed as dist


class ShardedOptimizer:
    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = list(params)
        world = dist.get_world_size()
        self.owner = [i % world for i in range(len(self.params))]
        mine = [p for p, o in zip(self.params, self.owner) if o == dist.get_rank()]
        self.optimizer = optimizer_cls(mine, **kwargs)

    def step(self) -> None:
        self.optimizer.step()
        for p, owner in zip(self.params, self.owner):
            dist.broadcast(p.data, src=owner)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None
