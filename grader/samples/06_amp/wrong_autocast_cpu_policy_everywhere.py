"""AUTOCAST_DTYPES gives the CPU policy for CUDA too (softmax, sum, layer_norm kept in float16)."""

# fails: test_autocast_dtypes
# fails-on-gpu: test_autocast_dtypes_cuda
# %% autocast_dtypes
import torch

from grader.checks.ch06_amp import AUTOCAST_CASES

LOW = {"matmul", "conv2d", "relu_of_linear", "softmax_of_linear", "sum_of_linear"}
LOW |= {"layer_norm_of_linear"}
AUTOCAST_DTYPES = {
    f"{d}/{name}": torch.float16 if name in LOW else torch.float32
    for d in ("cpu", "cuda")
    for name in AUTOCAST_CASES
}
