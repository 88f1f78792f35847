"""A correct ShardedOptimizer written differently: the parameters are cut, in their order, into
consecutive runs of about 1/N of the bytes each; the updated parameters reach every rank by an
all-reduce in which the ranks that do not own a parameter contribute zeros; zero_grad honours
set_to_none=False by zeroing the gradients in place."""

# %% sharded_optimizer
import torch
import torch.distributed as dist


class ShardedOptimizer:
    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = [p for p in params if p.requires_grad]
        self.rank, world = dist.get_rank(), dist.get_world_size()
        total = sum(p.numel() * p.element_size() for p in self.params)
        self.owner, before = [], 0
        for p in self.params:  # the rank whose 1/N of the bytes this parameter starts in
            self.owner.append(min(before * world // total, world - 1))
            before += p.numel() * p.element_size()
        mine = [p for p, o in zip(self.params, self.owner) if o == self.rank]
        self.optimizer = optimizer_cls(mine, **kwargs) if mine else None

    @torch.no_grad()
    def step(self) -> None:
        if self.optimizer is not None:
            self.optimizer.step()
        for p, owner in zip(self.params, self.owner):
            if owner != self.rank:
                p.zero_()
            dist.all_reduce(p)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.detach_().zero_()
