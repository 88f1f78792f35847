"""A correct SequenceParallelMLP written differently: the list forms dist.all_gather and
dist.reduce_scatter (chunks of dim 0), shards from torch.chunk, the norm as F.layer_norm with
the given module's parameters."""

# %% sequence_parallel_mlp
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def gather_seq(x):
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts, dim=0)


def scatter_seq(x):
    parts = [c.contiguous() for c in x.chunk(dist.get_world_size(), dim=0)]
    out = torch.empty_like(parts[0])
    dist.reduce_scatter(out, parts)
    return out


class GatherFromSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return gather_seq(x)

    @staticmethod
    def backward(ctx, grad):
        return scatter_seq(grad)


class ReduceScatterToSequenceParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return scatter_seq(x)

    @staticmethod
    def backward(ctx, grad):
        return gather_seq(grad)


class SequenceParallelMLP(nn.Module):
    def __init__(self, norm, fc1, fc2):
        super().__init__()
        rank, world = dist.get_rank(), dist.get_world_size()
        self.eps = norm.eps
        self.norm_weight, self.norm_bias = norm.weight, norm.bias
        self.fc1_w = nn.Parameter(fc1.weight.detach().chunk(world)[rank].clone())
        self.fc1_b = nn.Parameter(fc1.bias.detach().chunk(world)[rank].clone())
        self.fc2_w = nn.Parameter(fc2.weight.detach().chunk(world, dim=1)[rank].clone())
        self.fc2_b = nn.Parameter(fc2.bias.detach().clone())

    def forward(self, x_shard):
        normed = F.layer_norm(
            x_shard, x_shard.shape[-1:], self.norm_weight, self.norm_bias, self.eps
        )
        hidden = F.gelu(F.linear(GatherFromSequenceParallel.apply(normed), self.fc1_w, self.fc1_b))
        out = ReduceScatterToSequenceParallel.apply(F.linear(hidden, self.fc2_w)) + self.fc2_b
        return out + x_shard
