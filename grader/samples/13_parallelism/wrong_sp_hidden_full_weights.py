"""SequenceParallelMLP whose collectives carry the right data (the gathered norm, the shards'
partial outputs) but whose output comes from full copies of fc1 and fc2 kept in a closure: right
until the parameters change (an optimizer step), then the output no longer follows them."""

# fails: test_sequence_parallel_mlp
# %% sequence_parallel_mlp
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def gather_seq(x):
    out = x.new_empty((dist.get_world_size() * x.shape[0], *x.shape[1:]))
    dist.all_gather_into_tensor(out, x.contiguous())
    return out


def scatter_seq(x):
    out = x.new_empty((x.shape[0] // dist.get_world_size(), *x.shape[1:]))
    dist.reduce_scatter_tensor(out, x.contiguous())
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
        n = fc1.out_features // world
        rows = slice(rank * n, (rank + 1) * n)
        self.norm = norm
        self.w1 = nn.Parameter(fc1.weight.detach()[rows].clone())
        self.b1 = nn.Parameter(fc1.bias.detach()[rows].clone())
        self.w2 = nn.Parameter(fc2.weight.detach()[:, rows].clone())
        self.b2 = nn.Parameter(fc2.bias.detach().clone())
        w1, b1, w2 = (t.detach().clone() for t in (fc1.weight, fc1.bias, fc2.weight))
        self.full = lambda z: F.linear(F.gelu(F.linear(z, w1, b1)), w2)  # hidden full weights
        self.rank, self.world = rank, world

    def forward(self, x_shard):
        full = GatherFromSequenceParallel.apply(self.norm(x_shard))
        hidden = F.gelu(F.linear(full, self.w1, self.b1))
        mine = ReduceScatterToSequenceParallel.apply(F.linear(hidden, self.w2))
        n = x_shard.shape[0]
        local = self.full(full.detach())[self.rank * n : (self.rank + 1) * n]
        # the value from the hidden copy; the gradients through the shards and the collectives
        return x_shard + local + (mine - mine.detach()) + self.b2
