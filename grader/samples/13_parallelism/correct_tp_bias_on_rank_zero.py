"""A correct ColumnRowMLP written differently: only rank 0 keeps fc2's bias, and adds it to its
partial output before the all-reduce, so the sum holds it once (the other ranks hold no copy)."""

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
        self.fc1 = nn.Linear(fc1.in_features, n).to(fc1.weight.dtype)
        self.fc2 = nn.Linear(n, fc2.out_features, bias=rank == 0).to(fc2.weight.dtype)
        with torch.no_grad():
            self.fc1.weight.copy_(fc1.weight[rows])
            self.fc1.bias.copy_(fc1.bias[rows])
            self.fc2.weight.copy_(fc2.weight[:, rows])
            if rank == 0:
                self.fc2.bias.copy_(fc2.bias)

    def forward(self, x):
        hidden = F.gelu(self.fc1(CopyToTensorParallel.apply(x)))
        return ReduceFromTensorParallel.apply(self.fc2(hidden))
