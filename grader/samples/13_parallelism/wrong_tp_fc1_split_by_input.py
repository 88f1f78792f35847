"""ColumnRowMLP that splits fc1 by its input features (columns of fc1.weight): each rank gets a
partial sum of every hidden feature, applies GELU to it and multiplies by the whole fc2; GELU
of partial sums is not the GELU of their sum."""

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
        k = fc1.in_features // world
        self.cols = slice(rank * k, (rank + 1) * k)
        self.w1 = nn.Parameter(fc1.weight.detach()[:, self.cols].clone())
        self.b1 = nn.Parameter(fc1.bias.detach().clone() / world)
        self.w2 = nn.Parameter(fc2.weight.detach().clone() / world)
        self.b2 = nn.Parameter(fc2.bias.detach().clone())

    def forward(self, x):
        x = CopyToTensorParallel.apply(x)
        hidden = F.gelu(F.linear(x[..., self.cols], self.w1, self.b1))
        return ReduceFromTensorParallel.apply(F.linear(hidden, self.w2)) + self.b2
