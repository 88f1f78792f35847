"""ShardedOptimizer whose owner alone calls dist.broadcast for its parameters (the receivers
never call it): the ranks wait for each other forever. The course's launcher stops them at its
deadline and the check says which ranks hung."""

# fails: test_sharded_optimizer
# %% sharded_optimizer
import torch.distributed as dist


class ShardedOptimizer:
    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = list(params)
        world = dist.get_world_size()
        load = [0] * world
        self.owner = []
        for p in self.params:
            owner = load.index(min(load))
            load[owner] += p.numel()
            self.owner.append(owner)
        mine = [p for p, o in zip(self.params, self.owner) if o == dist.get_rank()]
        self.optimizer = optimizer_cls(mine, **kwargs)

    def step(self) -> None:
        self.optimizer.step()
        for p, owner in zip(self.params, self.owner):
            if owner == dist.get_rank():
                dist.broadcast(p.data, src=owner)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None
