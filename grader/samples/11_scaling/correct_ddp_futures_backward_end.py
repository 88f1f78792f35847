"""A correct BucketedDDP written differently, as DistributedDataParallel itself does it: each
bucket's all-reduce carries a future callback that averages it and copies it back, and a
callback queued on autograd's engine waits for them all when backward ends (after the last
gradient: nothing is left to overlap), so finish_gradient_synchronization only resets."""

# %% bucketed_ddp
import torch
import torch.distributed as dist
from torch import nn
from torch.autograd import Variable


class BucketedDDP(nn.Module):
    def __init__(self, module: nn.Module, bucket_bytes: int):
        super().__init__()
        self.module = module
        self.buckets = []
        size = bucket_bytes + 1
        for p in reversed([p for p in module.parameters() if p.requires_grad]):
            nbytes = p.numel() * p.element_size()
            if size + nbytes > bucket_bytes:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += nbytes
            p.register_post_accumulate_grad_hook(self._ready)
        self.where = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self._reset()

    def _reset(self):
        self.left = [len(b) for b in self.buckets]
        self.futures = []
        self.queued = False

    def _ready(self, p):
        if not self.queued:  # the first gradient of this backward
            Variable._execution_engine.queue_callback(self._wait_all)
            self.queued = True
        i = self.where[id(p)]
        self.left[i] -= 1
        if self.left[i] == 0:
            bucket = self.buckets[i]
            flat = torch.cat([q.grad.reshape(-1) for q in bucket])
            work = dist.all_reduce(flat, async_op=True)

            def copy_back(fut, bucket=bucket):
                averaged = fut.value()[0] / dist.get_world_size()
                for q, part in zip(bucket, averaged.split([q.numel() for q in bucket])):
                    q.grad.copy_(part.view_as(q.grad))

            self.futures.append(work.get_future().then(copy_back))

    def _wait_all(self):
        torch.futures.wait_all(self.futures)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        torch.futures.wait_all(self.futures)
        self._reset()
