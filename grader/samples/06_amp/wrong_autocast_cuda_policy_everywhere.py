"""AUTOCAST_DTYPES gives the CUDA policy for the CPU too (softmax, sum, layer_norm in float32)."""

# fails: test_autocast_dtypes
# %% autocast_dtypes
import torch

from grader.checks.ch06_amp import AUTOCAST_CASES

LOW = {"matmul", "conv2d", "relu_of_linear"}
AUTOCAST_DTYPES = {
    f"{d}/{name}": torch.float16 if name in LOW else torch.float32
    for d in ("cpu", "cuda")
    for name in AUTOCAST_CASES
}
