"""ColumnRowMLP with the two operators swapped: the input all-reduced in forward (every rank
holds the same x, so it is multiplied by the world size) and nothing summed at the output."""

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


class ReduceFromTensorParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous().clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class ColumnRowMLP(nn.Module):
    def __init__(self, fc1, fc2):
        super().__init__()
        rank, world = dist.get_rank(), dist.get_world_size()
        n = fc1.out_features // world
        rows = slice(rank * n, (rank + 1) * n)
        self.w1 = nn.Parameter(fc1.weight.detach()[rows].clone())
        self.b1 = nn.Parameter(fc1.bias.detach()[rows].clone())
        self.w2 = nn.Parameter(fc2.weight.detach()[:, rows].clone())
        self.b2 = nn.Parameter(fc2.bias.detach().clone())

    def forward(self, x):
        x = ReduceFromTensorParallel.apply(x)
        hidden = F.gelu(F.linear(x, self.w1, self.b1))
        return CopyToTensorParallel.apply(F.linear(hidden, self.w2)) + self.b2
