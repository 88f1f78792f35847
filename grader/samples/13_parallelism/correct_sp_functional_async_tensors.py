"""A correct SequenceParallelMLP written differently: the two Functions call PyTorch's
functional collectives (funcol.all_gather_tensor, reduce_scatter_tensor), which return
AsyncCollectiveTensors (waited on when first used; autograd saves them as they are); the norm
applied with F.layer_norm to the given norm's parameters and eps, fc2.weight's shard stored transposed,
shards via torch.chunk."""

# %% sequence_parallel_mlp
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch import nn


class GatherFromSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return funcol.all_gather_tensor(x.contiguous(), 0, dist.group.WORLD)

    @staticmethod
    def backward(ctx, grad):
        return funcol.reduce_scatter_tensor(grad.contiguous(), "sum", 0, dist.group.WORLD)


class ReduceScatterToSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return funcol.reduce_scatter_tensor(x.contiguous(), "sum", 0, dist.group.WORLD)

    @staticmethod
    def backward(ctx, grad):
        return funcol.all_gather_tensor(grad.contiguous(), 0, dist.group.WORLD)


class SequenceParallelMLP(nn.Module):
    def __init__(self, norm, fc1, fc2):
        super().__init__()
        rank, world = dist.get_rank(), dist.get_world_size()
        self.norm = norm
        self.w1 = nn.Parameter(torch.chunk(fc1.weight.detach(), world, 0)[rank].clone())
        self.b1 = nn.Parameter(torch.chunk(fc1.bias.detach(), world, 0)[rank].clone())
        self.w2t = nn.Parameter(torch.chunk(fc2.weight.detach(), world, 1)[rank].T.clone())
        self.b2 = nn.Parameter(fc2.bias.detach().clone())

    def forward(self, x_shard):
        norm = self.norm
        z = F.layer_norm(x_shard, x_shard.shape[-1:], norm.weight, norm.bias, norm.eps)
        full = GatherFromSequenceParallel.apply(z)
        partial = F.gelu(full @ self.w1.T + self.b1) @ self.w2t
        return x_shard + ReduceScatterToSequenceParallel.apply(partial) + self.b2
