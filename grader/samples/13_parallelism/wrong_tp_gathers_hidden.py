"""ColumnRowMLP that all-gathers the hidden activations and applies the whole fc2 on every rank:
right values and gradients, but an extra all-gather, and fc2's full weight on every rank."""

# fails: test_column_row_mlp
# %% column_row_mlp
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class CopyToTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


class GatherHidden(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h):
        parts = [torch.empty_like(h) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, h.contiguous())
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx, grad):
        n = grad.shape[-1] // dist.get_world_size()
        return grad[..., dist.get_rank() * n : (dist.get_rank() + 1) * n].contiguous()


class ColumnRowMLP(nn.Module):
    def __init__(self, fc1, fc2):
        super().__init__()
        rank, world = dist.get_rank(), dist.get_world_size()
        n = fc1.out_features // world
        rows = slice(rank * n, (rank + 1) * n)
        self.w1 = nn.Parameter(fc1.weight.detach()[rows].clone())
        self.b1 = nn.Parameter(fc1.bias.detach()[rows].clone())
        self.w2 = nn.Parameter(fc2.weight.detach().clone())
        self.b2 = nn.Parameter(fc2.bias.detach().clone())

    def forward(self, x):
        x = CopyToTensorParallel.apply(x)
        hidden = GatherHidden.apply(F.gelu(F.linear(x, self.w1, self.b1)))
        return F.linear(hidden, self.w2, self.b2)
