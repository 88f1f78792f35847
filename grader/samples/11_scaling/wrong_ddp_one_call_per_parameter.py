"""BucketedDDP that ignores bucket_bytes: one asynchronous all-reduce per parameter, from its
hook (overlapped, but pays the latency of a call per parameter)."""

# fails: test_bucketed_ddp
# %% bucketed_ddp
import torch.distributed as dist
from torch import nn


class BucketedDDP(nn.Module):
    def __init__(self, module: nn.Module, bucket_bytes: int):
        super().__init__()
        self.module = module
        self.pending = []
        for p in module.parameters():
            p.register_post_accumulate_grad_hook(self._hook)

    def _hook(self, p):
        self.pending.append((dist.all_reduce(p.grad, async_op=True), p))

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self) -> None:
        for work, p in self.pending:
            work.wait()
            p.grad /= dist.get_world_size()
        self.pending.clear()
