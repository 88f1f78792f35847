"""SequenceParallelMLP that all-gathers the raw input and applies the norm to the whole sequence
(as wrong_sp_norm_after_gather), hiding what autograd saves from the grader's counter by its
own (innermost) saved_tensors_hooks, which return the tensors unchanged."""

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

    def forward(self, x_shard):
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            return self._forward(x_shard)

    def _forward(self, x_shard):
        full = self.norm(GatherFromSequenceParallel.apply(x_shard))
        hidden = F.gelu(F.linear(full, self.w1, self.b1))
        return x_shard + ReduceScatterToSequenceParallel.apply(F.linear(hidden, self.w2)) + self.b2
