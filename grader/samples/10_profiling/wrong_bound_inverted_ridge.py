"""predict_bound computes the ridge point upside down (bandwidth / peak), so everything looks
compute-bound."""
# ruff: noqa: F821 - arithmetic_intensity is defined by the notebook's earlier cell

# fails: test_predict_bound
# %% predict_bound
import torch

from grader.checks.ch10_profiling import GPUS


def predict_bound(op, shape, dtype, gpu):
    spec = GPUS[gpu]
    key = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    ridge = spec.memory_gb_s * 1e9 / (spec.tflops[key] * 1e12)
    return "compute" if arithmetic_intensity(op, shape, dtype) >= ridge else "memory"
