"""ddp_train builds the DistributedSampler without seed=config["seed"]: it shuffles with its default
seed 0, not the configured one."""

# fails: test_ddp_train
# %% ddp_train
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


def ddp_train(rank: int, world_size: int, config: dict) -> None:
    dist.init_process_group(
        config["backend"], init_method=config["init_method"], rank=rank, world_size=world_size
    )
    try:
        x, y = torch.load(config["data"])
        dataset = TensorDataset(x, y)
        torch.manual_seed(config["seed"])
        model = make_model()
        ddp_model = DistributedDataParallel(model)
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
        loader = DataLoader(dataset, batch_size=config["batch_size"], sampler=sampler)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=config["lr"])
        for epoch in range(config["epochs"]):
            sampler.set_epoch(epoch)
            for xb, yb in loader:
                optimizer.zero_grad()
                F.mse_loss(ddp_model(xb), yb).backward()
                optimizer.step()
        if rank == 0:
            torch.save(model.state_dict(), config["out"])
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
    with open(sys.argv[1]) as f:
        ddp_train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), json.load(f))
