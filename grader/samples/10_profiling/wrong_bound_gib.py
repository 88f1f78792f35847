"""predict_bound reads the bandwidth as GiB/s (memory_gb_s * 2**30 bytes/s) instead of GB/s
(10^9): every ridge point comes out 7 % low, and an op just below the ridge is called
compute-bound."""
# ruff: noqa: F821 - arithmetic_intensity is defined by the notebook's earlier cell

# fails: test_predict_bound
# %% predict_bound
import torch

from grader.checks.ch10_profiling import GPUS


def predict_bound(op, shape, dtype, gpu):
    spec = GPUS[gpu]
    key = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    ridge = spec.tflops[key] * 1e12 / (spec.memory_gb_s * 2**30)
    return "compute" if arithmetic_intensity(op, shape, dtype) >= ridge else "memory"
