"""A correct BucketedDDP written differently: gradients divided before the all-reduce, a set of
missing parameters per bucket instead of a counter, and the buffers copied back with torch's
flatten helpers."""

# %% bucketed_ddp
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


class BucketedDDP(nn.Module):
    def __init__(self, module: nn.Module, bucket_bytes: int):
        super().__init__()
        self.module = module
        self.buckets = []
        current, size = [], 0
        for p in reversed(list(module.parameters())):
            if not p.requires_grad:
                continue
            nbytes = p.numel() * p.element_size()
            if current and size + nbytes > bucket_bytes:
                self.buckets.append(current)
                current, size = [], 0
            current.append(p)
            size += nbytes
        if current:
            self.buckets.append(current)
        self.missing = [set(map(id, b)) for b in self.buckets]
        self.works = []
        for i, bucket in enumerate(self.buckets):
            for p in bucket:
                p.register_post_accumulate_grad_hook(lambda q, i=i: self._ready(q, i))

    def _ready(self, p, i):
        self.missing[i].discard(id(p))
        if not self.missing[i]:
            grads = [q.grad for q in self.buckets[i]]
            flat = _flatten_dense_tensors(grads) / dist.get_world_size()
            self.works.append((dist.all_reduce(flat, async_op=True), flat, grads))

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        for work, flat, grads in self.works:
            work.wait()
            for g, averaged in zip(grads, _unflatten_dense_tensors(flat, grads)):
                g.copy_(averaged)
        self.works = []
        self.missing = [set(map(id, b)) for b in self.buckets]
