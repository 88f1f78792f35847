"""arithmetic_intensity counts m*k*n FLOPs for a matmul (multiply-adds, not FLOPs): half the
intensity."""

# fails: test_arithmetic_intensity, test_predict_bound
# %% arithmetic_intensity
import math

import torch


def arithmetic_intensity(op, shape, dtype=torch.float32):
    size = torch.empty((), dtype=dtype).element_size()
    if op == "matmul":
        m, k, n = shape
        return m * k * n / ((m * k + k * n + m * n) * size)
    per_element = {"add": (1, 3), "relu": (1, 2), "softmax": (5, 2), "layer_norm": (8, 2)}
    if op not in per_element:
        raise ValueError(op)
    flops, moved = per_element[op]
    return flops * math.prod(shape) / (moved * math.prod(shape) * size)
