"""bias_gelu calls torch instead of writing a kernel: right values, no Triton kernel launched
(torch runs an add and a GELU, two kernels on a GPU)."""

# fails: test_bias_gelu
# may-fail-on-gpu: test_bias_gelu_cuda
# %% bias_gelu
import torch.nn.functional as F


def bias_gelu(x, bias):
    return F.gelu(x + bias, approximate="tanh")
