"""A correct seed_everything written differently: seeds CUDA explicitly and sets flags with setattr."""

# %% seed_everything
import random as py_random

import numpy
import torch


def seed_everything(seed: int) -> None:
    py_random.seed(seed)
    numpy.random.seed(seed % 2**32)
    torch.random.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)  # a no-op without CUDA
    for flag, value in (("deterministic", True), ("benchmark", False)):
        setattr(torch.backends.cudnn, flag, value)
