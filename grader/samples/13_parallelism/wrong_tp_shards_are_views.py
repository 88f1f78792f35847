"""ColumnRowMLP whose shards are views of the full layers' weights (no copy): each parameter
has this rank's values, but keeps the whole storage of fc1.weight (or fc2.weight) alive, so a
rank holds the full weights' memory."""

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


class ReduceAddBias(torch.autograd.Function):
    @staticmethod
    def forward(ctx, partial, bias):
        out = partial.contiguous().clone()
        dist.all_reduce(out)
        return out + bias

    @staticmethod
    def backward(ctx, grad):
        return grad, grad.reshape(-1, grad.shape[-1]).sum(0)


class ColumnRowMLP(nn.Module):
    def __init__(self, fc1, fc2):
        super().__init__()
        rank, world = dist.get_rank(), dist.get_world_size()
        n = fc1.out_features // world
        self.shards = nn.ParameterDict(
            {
                "fc1_weight": fc1.weight.detach().narrow(0, rank * n, n),
                "fc1_bias": fc1.bias.detach().narrow(0, rank * n, n),
                "fc2_weight": fc2.weight.detach().narrow(1, rank * n, n),
                "fc2_bias": fc2.bias.detach(),
            }
        )

    def forward(self, x):
        p = self.shards
        hidden = F.gelu(F.linear(CopyToTensorParallel.apply(x), p["fc1_weight"], p["fc1_bias"]))
        return ReduceAddBias.apply(F.linear(hidden, p["fc2_weight"]), p["fc2_bias"])
