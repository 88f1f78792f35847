"""AUTOCAST_DTYPES says autocast runs every op in float16."""

# fails: test_autocast_dtypes
# fails-on-gpu: test_autocast_dtypes_cuda
# %% autocast_dtypes
import torch

from grader.checks.ch06_amp import AUTOCAST_CASES

AUTOCAST_DTYPES = {f"{d}/{name}": torch.float16 for d in ("cpu", "cuda") for name in AUTOCAST_CASES}
