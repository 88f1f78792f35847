"""arithmetic_intensity takes the element size from torch.finfo(dtype).bits: bits, not bytes,
so every intensity is 8x too low."""

# fails: test_arithmetic_intensity, test_predict_bound
# %% arithmetic_intensity
import math

import torch


def arithmetic_intensity(op, shape, dtype=torch.float32):
    size = torch.finfo(dtype).bits
    if op == "matmul":
        m, k, n = shape
        return 2 * m * k * n / ((m * k + k * n + m * n) * size)
    per_element = {"add": (1, 3), "relu": (1, 2), "softmax": (5, 2), "layer_norm": (8, 2)}
    if op not in per_element:
        raise ValueError(op)
    flops, moved = per_element[op]
    return flops * math.prod(shape) / (moved * math.prod(shape) * size)
