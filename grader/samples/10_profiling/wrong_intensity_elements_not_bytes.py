"""arithmetic_intensity divides by the number of elements moved, not the bytes: FLOP/element,
off by the element size (2 for bf16, 4 for float32)."""

# fails: test_arithmetic_intensity, test_predict_bound
# %% arithmetic_intensity
import math

import torch


def arithmetic_intensity(op, shape, dtype=torch.float32):
    if op == "matmul":
        m, k, n = shape
        return 2 * m * k * n / (m * k + k * n + m * n)
    per_element = {"add": (1, 3), "relu": (1, 2), "softmax": (5, 2), "layer_norm": (8, 2)}
    if op not in per_element:
        raise ValueError(op)
    flops, moved = per_element[op]
    numel = math.prod(shape)
    return flops * numel / (moved * numel)
