"""ShardedOptimizer whose zero_grad zeroes every gradient in place whatever set_to_none says:
zero_grad() must leave .grad None (as torch.optim does by default), which frees the memory
until the next backward."""

# fails: test_sharded_optimizer
# %% sharded_optimizer
import torch.distributed as dist


class ShardedOptimizer:
    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = [p for p in params if p.requires_grad]
        world = dist.get_world_size()
        load = [0] * world
        self.owner = [0] * len(self.params)
        for i in sorted(range(len(self.params)), key=lambda i: -self.params[i].numel()):
            self.owner[i] = load.index(min(load))
            load[self.owner[i]] += self.params[i].numel() * self.params[i].element_size()
        mine = [p for p, o in zip(self.params, self.owner) if o == dist.get_rank()]
        self.optimizer = optimizer_cls(mine, **kwargs)

    def step(self) -> None:
        self.optimizer.step()
        for p, owner in zip(self.params, self.owner):
            dist.broadcast(p.data, src=owner)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:  # every parameter, but always zeroed in place
            if p.grad is not None:
                p.grad.zero_()
