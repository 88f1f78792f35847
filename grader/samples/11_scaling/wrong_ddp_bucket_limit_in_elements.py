"""BucketedDDP that compares bucket_bytes with a number of elements (p.numel()) instead of
bytes: with float32 gradients every bucket may grow to 4 times bucket_bytes."""

# fails: test_bucketed_ddp
# %% bucketed_ddp
import torch
import torch.distributed as dist
from torch import nn


class BucketedDDP(nn.Module):
    def __init__(self, module: nn.Module, bucket_bytes: int):
        super().__init__()
        self.module = module
        params = [p for p in module.parameters() if p.requires_grad]
        self.buckets, size = [], 0
        for p in reversed(params):
            nbytes = p.numel()
            if self.buckets and size + nbytes <= bucket_bytes:
                self.buckets[-1].append(p)
                size += nbytes
            else:
                self.buckets.append([p])
                size = nbytes
        self.index = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self.ready = [0] * len(self.buckets)
        self.pending = []
        for p in params:
            p.register_post_accumulate_grad_hook(self._hook)

    def _hook(self, p):
        i = self.index[id(p)]
        self.ready[i] += 1
        if self.ready[i] == len(self.buckets[i]):
            flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[i]])
            self.pending.append((dist.all_reduce(flat, async_op=True), flat, i))

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        for work, flat, i in self.pending:
            work.wait()
            flat /= dist.get_world_size()
            offset = 0
            for q in self.buckets[i]:
                q.grad.copy_(flat[offset : offset + q.numel()].view_as(q.grad))
                offset += q.numel()
        self.pending.clear()
        self.ready = [0] * len(self.buckets)
