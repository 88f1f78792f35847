"""AUTOCAST_DTYPES thinks float16 + float32 stays float16 (it promotes to float32)."""

# fails: test_autocast_dtypes
# fails-on-gpu: test_autocast_dtypes_cuda
# %% autocast_dtypes
import torch

from grader.checks.ch06_amp import AUTOCAST_CASES

f16, f32 = torch.float16, torch.float32
CUDA = {
    "matmul": f16,
    "conv2d": f16,
    "relu": f32,
    "relu_of_linear": f16,
    "linear_plus_input": f16,
    "softmax_of_linear": f32,
    "sum_of_linear": f32,
    "layer_norm_of_linear": f32,
    "mse_loss_of_linear": f32,
    "cross_entropy_of_linear": f32,
}
CPU = dict(CUDA, softmax_of_linear=f16, sum_of_linear=f16, layer_norm_of_linear=f16)
AUTOCAST_DTYPES = {f"cuda/{k}": v for k, v in CUDA.items()} | {
    f"cpu/{k}": v for k, v in CPU.items()
}
