"""arithmetic_intensity forgets that a matmul writes its output (m*n elements) and that an add
writes one: only the inputs are counted as traffic."""

# fails: test_arithmetic_intensity, test_predict_bound
# %% arithmetic_intensity
import math

import torch


def arithmetic_intensity(op, shape, dtype=torch.float32):
    size = torch.empty((), dtype=dtype).element_size()
    if op == "matmul":
        m, k, n = shape
        return 2 * m * k * n / ((m * k + k * n) * size)
    per_element = {"add": (1, 2), "relu": (1, 1), "softmax": (5, 1), "layer_norm": (8, 1)}
    if op not in per_element:
        raise ValueError(op)
    flops, moved = per_element[op]
    return flops * math.prod(shape) / (moved * math.prod(shape) * size)
