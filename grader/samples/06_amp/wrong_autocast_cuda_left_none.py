"""AUTOCAST_DTYPES gives the cpu/ entries (measured) and leaves every cuda/ entry None."""

# fails: test_autocast_dtypes
# fails-on-gpu: test_autocast_dtypes_cuda
# %% autocast_dtypes
import torch

from grader.checks.ch06_amp import AUTOCAST_CASES

f16, f32 = torch.float16, torch.float32
CPU = {
    "matmul": f16,
    "conv2d": f16,
    "relu": f32,
    "relu_of_linear": f16,
    "linear_plus_input": f32,
    "softmax_of_linear": f16,
    "sum_of_linear": f16,
    "layer_norm_of_linear": f16,
    "mse_loss_of_linear": f32,
    "cross_entropy_of_linear": f32,
}
AUTOCAST_DTYPES = {f"cpu/{k}": v for k, v in CPU.items()} | {
    f"cuda/{k}": None for k in AUTOCAST_CASES
}
