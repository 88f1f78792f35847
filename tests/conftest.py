"""Shared test setup: hardware markers and the hypothesis profile."""

import os

import pytest
import torch
from hypothesis import HealthCheck, settings

# No deadlines: CI machines have 2 busy cores, and timing belongs in benchmarks, not here.
settings.register_profile(
    "ci", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items):
    """Skip `cuda` / `multi_gpu` tests, with the reason, where the hardware is missing; mark
    every notebook run by nbmake `slow` (the fast tier, `-m "not slow"`, leaves them out)."""
    n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if str(item.fspath).endswith(".ipynb"):
            item.add_marker(pytest.mark.slow)
        if "cuda" in item.keywords and n_gpus == 0:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU; this machine has none"))
        if "multi_gpu" in item.keywords and n_gpus < 2:
            item.add_marker(
                pytest.mark.skip(reason=f"needs 2+ CUDA GPUs; this machine has {n_gpus}")
            )
