"""A correct average_gradients written differently: one all-reduce of all gradients flattened
into a single buffer (what DDP's buckets do), then copied back."""

# %% average_gradients
import torch
import torch.distributed as dist


def average_gradients(model) -> None:
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat.div_(dist.get_world_size())
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()
