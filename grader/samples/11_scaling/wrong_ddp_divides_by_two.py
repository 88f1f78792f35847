"""BucketedDDP that divides the summed gradients by 2, the number of processes it was tried
with, instead of the world size: right on 2 ranks, wrong on any other number."""

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
            nbytes = p.numel() * p.element_size()
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
            flat /= 2
            offset = 0
            for q in self.buckets[i]:
                q.grad.copy_(flat[offset : offset + q.numel()].view_as(q.grad))
                offset += q.numel()
        self.pending.clear()
        self.ready = [0] * len(self.buckets)
