"""ShardedOptimizer that does not shard: every rank runs the full optimizer on all the
parameters (right parameters, but every rank holds all of Adam's state)."""

# fails: test_sharded_optimizer
# %% sharded_optimizer
import torch


class ShardedOptimizer:
    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = list(params)
        self.optimizer = optimizer_cls(self.params, **kwargs)

    def step(self) -> None:
        self.optimizer.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)
