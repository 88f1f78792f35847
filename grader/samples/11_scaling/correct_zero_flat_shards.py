"""A correct ShardedOptimizer written differently: all parameters flattened into one vector,
each rank owns a contiguous 1/N slice of it (padded), steps the optimizer on that slice (an fp32
master copy of the slice), and all-gathers the slices back into the parameters."""

# %% sharded_optimizer
import torch
import torch.distributed as dist


class ShardedOptimizer:
    def __init__(self, params, optimizer_cls, **kwargs):
        self.params = [p for p in params if p.requires_grad]
        self.world = dist.get_world_size()
        total = sum(p.numel() for p in self.params)
        self.chunk = -(-total // self.world)
        flat = self._flat([p.detach() for p in self.params])
        start = dist.get_rank() * self.chunk
        self.shard = torch.nn.Parameter(flat[start : start + self.chunk].clone())
        self.start = start
        self.optimizer = optimizer_cls([self.shard], **kwargs)

    def _flat(self, tensors):
        flat = torch.cat([t.reshape(-1) for t in tensors])
        return torch.nn.functional.pad(flat, (0, self.chunk * self.world - flat.numel()))

    def step(self) -> None:
        grads = self._flat([p.grad for p in self.params])
        self.shard.grad = grads[self.start : self.start + self.chunk].clone()
        self.optimizer.step()
        gathered = [torch.empty_like(self.shard.data) for _ in range(self.world)]
        dist.all_gather(gathered, self.shard.data)
        flat = torch.cat(gathered)
        offset = 0
        with torch.no_grad():
            for p in self.params:
                p.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.detach_().zero_()
