"""BucketedDDP that buckets correctly but starts every all-reduce in
finish_gradient_synchronization, after backward (07's average, bucketed): no overlap."""

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

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        for bucket in self.buckets:
            flat = torch.cat([p.grad.reshape(-1) for p in bucket])
            dist.all_reduce(flat)
            flat /= dist.get_world_size()
            offset = 0
            for p in bucket:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
                offset += p.numel()
