"""AUTOCAST_DTYPES writes the cuda/ entries as strings ("torch.float16"), not torch dtypes; the
values are otherwise right."""

# fails: test_autocast_dtypes
# fails-on-gpu: test_autocast_dtypes_cuda
# %% autocast_dtypes
import torch

f16, f32 = torch.float16, torch.float32
CUDA = {
    "matmul": f16,
    "conv2d": f16,
    "relu": f32,
    "relu_of_linear": f16,
    "linear_plus_input": f32,
    "softmax_of_linear": f32,
    "sum_of_linear": f32,
    "layer_norm_of_linear": f32,
    "mse_loss_of_linear": f32,
    "cross_entropy_of_linear": f32,
}
CPU = dict(CUDA, softmax_of_linear=f16, sum_of_linear=f16, layer_norm_of_linear=f16)
AUTOCAST_DTYPES = {f"cuda/{k}": str(v) for k, v in CUDA.items()} | {
    f"cpu/{k}": v for k, v in CPU.items()
}
