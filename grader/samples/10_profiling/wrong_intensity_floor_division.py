"""arithmetic_intensity divides with // (floor division): the matmul's 1365.33 FLOP/byte
becomes 1365.0, and an add's 1/12 becomes 0."""

# fails: test_arithmetic_intensity
# %% arithmetic_intensity
import math

import torch


def arithmetic_intensity(op, shape, dtype=torch.float32):
    size = dtype.itemsize
    if op == "matmul":
        m, k, n = shape
        return float(2 * m * k * n // ((m * k + k * n + m * n) * size))
    per_element = {"add": (1, 3), "relu": (1, 2), "softmax": (5, 2), "layer_norm": (8, 2)}
    if op not in per_element:
        raise ValueError(op)
    flops, moved = per_element[op]
    return float(flops * math.prod(shape) // (moved * math.prod(shape) * size))
