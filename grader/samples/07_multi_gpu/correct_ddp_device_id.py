"""A correct ddp_train written differently: the rank's GPU given to init_process_group as
device_id (with NCCL; None with gloo) instead of torch.cuda.set_device, batches drawn with
iter/next, and the state saved from the unwrapped model's parameters on the CPU."""

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
    gpu = config["backend"] == "nccl"
    device = torch.device("cuda", rank) if gpu else torch.device("cpu")
    dist.init_process_group(
        config["backend"],
        init_method=config["init_method"],
        rank=rank,
        world_size=world_size,
        device_id=device if gpu else None,
    )
    try:
        x, y = torch.load(config["data"])
        dataset = TensorDataset(x, y)
        torch.manual_seed(config["seed"])
        model = make_model().to(device)
        ddp_model = DistributedDataParallel(model, device_ids=[rank] if gpu else None)
        sampler = DistributedSampler(dataset, world_size, rank, shuffle=True, seed=config["seed"])
        loader = DataLoader(dataset, batch_size=config["batch_size"], sampler=sampler)
        optimizer = torch.optim.SGD(ddp_model.parameters(), lr=config["lr"])
        for epoch in range(config["epochs"]):
            sampler.set_epoch(epoch)
            batches = iter(loader)
            for _ in range(len(loader)):
                xb, yb = next(batches)
                loss = F.mse_loss(ddp_model(xb.to(device)), yb.to(device))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        if rank == 0:
            state = {name: p.detach().cpu() for name, p in model.state_dict().items()}
            torch.save(state, config["out"])
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":  # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
    with open(sys.argv[1]) as f:
        ddp_train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), json.load(f))
