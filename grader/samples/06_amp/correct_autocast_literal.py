"""A correct AUTOCAST_DTYPES written out entry by entry."""

# %% autocast_dtypes
import torch

f16, f32 = torch.float16, torch.float32
AUTOCAST_DTYPES = {
    "cpu/matmul": f16,
    "cpu/conv2d": f16,
    "cpu/relu": f32,
    "cpu/relu_of_linear": f16,
    "cpu/linear_plus_input": f32,
    "cpu/softmax_of_linear": f16,
    "cpu/sum_of_linear": f16,
    "cpu/layer_norm_of_linear": f16,
    "cpu/mse_loss_of_linear": f32,
    "cpu/cross_entropy_of_linear": f32,
    "cuda/matmul": f16,
    "cuda/conv2d": f16,
    "cuda/relu": f32,
    "cuda/relu_of_linear": f16,
    "cuda/linear_plus_input": f32,
    "cuda/softmax_of_linear": f32,
    "cuda/sum_of_linear": f32,
    "cuda/layer_norm_of_linear": f32,
    "cuda/mse_loss_of_linear": f32,
    "cuda/cross_entropy_of_linear": f32,
}
