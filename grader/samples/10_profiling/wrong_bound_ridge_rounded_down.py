"""predict_bound rounds the ridge point down to a whole FLOP/byte (// instead of /): an op just
below an H100's ridge of 295.34 FLOP/byte, at 295.33, is called compute-bound."""
# ruff: noqa: F821 - arithmetic_intensity is defined by the notebook's earlier cell

# fails: test_predict_bound
# %% predict_bound
import torch

from grader.checks.ch10_profiling import GPUS


def predict_bound(op, shape, dtype, gpu):
    spec = GPUS[gpu]
    key = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dtype]
    ridge = spec.tflops[key] * 1e12 // (spec.memory_gb_s * 1e9)
    return "compute" if arithmetic_intensity(op, shape, dtype) >= ridge else "memory"
