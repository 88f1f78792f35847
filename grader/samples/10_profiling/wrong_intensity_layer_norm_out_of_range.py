"""arithmetic_intensity counts 12 FLOPs per layer-norm element (every operation of the formula,
the weight and bias twice): more than the 3 to 10 the exercise allows. The old 2x band around
the reference's 8 let it pass."""

# fails: test_arithmetic_intensity
# %% arithmetic_intensity
import math

import torch


def arithmetic_intensity(op, shape, dtype=torch.float32):
    size = dtype.itemsize
    if op == "matmul":
        m, k, n = shape
        return 2 * m * k * n / ((m * k + k * n + m * n) * size)
    per_element = {"add": (1, 3), "relu": (1, 2), "softmax": (5, 2), "layer_norm": (12, 2)}
    if op not in per_element:
        raise ValueError(op)
    flops, moved = per_element[op]
    return flops * math.prod(shape) / (moved * math.prod(shape) * size)
