"""ShardedOptimizer that balances the shards by bytes, but over two ranks (load = [0, 0]), the
number of processes it was tried with: on 3 ranks the third owns nothing and the other two
each hold half of the state instead of a third."""

# fails: test_sharded_optimizer
# %% sharded_optimizer
import torch.distributed as dist


class ShardedOptimizer:
    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = [p for p in params if p.requires_grad]
        load = [0, 0]
        self.owner = []
        for p in self.params:
            owner = load.index(min(load))
            load[owner] += p.numel() * p.element_size()
            self.owner.append(owner)
        mine = [p for p, o in zip(self.params, self.owner) if o == dist.get_rank()]
        self.optimizer = optimizer_cls(mine, **kwargs) if mine else None

    def step(self) -> None:
        if self.optimizer is not None:
            self.optimizer.step()
        for p, owner in zip(self.params, self.owner):
            dist.broadcast(p.data, src=owner)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None
