"""ddp_train shards the data by hand, rank r taking every world_size-th sample of the epoch's
permutation: without DistributedSampler's padding the ranks get unequal shards when world_size
does not divide the data set (23 and 22 of 45), so their last batches differ in size and the
averaged gradient is not the mean over the union."""

# fails: test_ddp_train
# %% ddp_train
import contextlib

# DDP training of a small regression model; one process per rank.
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_model() -> nn.Module:
    """The model every rank trains (8 inputs, 1 output)."""
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))


@contextlib.contextmanager
def process_group(config, rank, world_size):
    dist.init_process_group(
        backend=config["backend"],
        init_method=config["init_method"],
        world_size=world_size,
        rank=rank,
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def ddp_train(rank: int, world_size: int, config: dict) -> None:
    with process_group(config, rank, world_size):
        x, y = torch.load(config["data"])
        torch.manual_seed(config["seed"])
        ddp_model = DistributedDataParallel(make_model())
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=config["lr"])
        b = config["batch_size"]
        for epoch in range(config["epochs"]):
            g = torch.Generator().manual_seed(config["seed"] + epoch)
            order = torch.randperm(len(x), generator=g)[rank::world_size]
            for start in range(0, len(order), b):
                idx = order[start : start + b]
                loss = F.mse_loss(ddp_model(x[idx]), y[idx])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
        if dist.get_rank() == 0:
            torch.save(ddp_model.module.state_dict(), config["out"])


if __name__ == "__main__":  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
    with open(sys.argv[1]) as f:
        ddp_train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), json.load(f))
