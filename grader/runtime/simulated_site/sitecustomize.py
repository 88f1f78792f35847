"""A simulated GPU machine for Python processes started by a check (on a CPU-only machine).

Not imported by the course's processes: a check of ``visible_gpu_count`` (01_devices) puts this
folder on ``PYTHONPATH`` and sets ``GPU_COURSE_SIMULATED_GPUS=N`` while the student's function
runs, so a fresh Python process it starts with a copy of the environment sees a machine with
``N`` GPUs: ``torch.cuda.device_count()`` there counts ``CUDA_VISIBLE_DEVICES`` as CUDA does
(:func:`visible_count`). Nothing changes in a process without that variable.
"""

import os

#: The variable that turns the simulation on, holding the number of simulated GPUs.
SIMULATED_GPUS_ENV = "GPU_COURSE_SIMULATED_GPUS"


def visible_count(raw, total: int) -> int:
    """How many GPUs CUDA exposes for a ``CUDA_VISIBLE_DEVICES`` value on a ``total``-GPU machine.

    The rule of CUDA (CUDA C++ Programming Guide, "CUDA Environment Variables") as PyTorch
    reads it without initialising CUDA (``torch.cuda._parse_visible_devices`` and
    ``_device_count_nvml``): unset exposes every GPU; otherwise each comma-separated entry is
    read like ``strtoul`` (leading digits), a negative or unreadable entry ends the list, an
    index at or past ``total`` ends it too, and a repeated index exposes no GPU at all.

    Args:
        raw: The variable's value, or None when it is unset.
        total: GPUs in the machine.
    """
    if raw is None:
        return total
    indices = []
    for part in raw.split(","):
        part = part.strip()
        digits = part[1:] if part[:1] in "+-" else part
        n = len(digits) - len(digits.lstrip("0123456789"))
        value = int(part[: n + (len(part) - len(digits))]) if n else -1
        if value in indices:
            return 0
        if value < 0:
            break
        indices.append(value)
    for position, index in enumerate(indices):
        if index >= total:
            return position
    return len(indices)


_COUNT = os.environ.get(SIMULATED_GPUS_ENV, "")
if _COUNT.isdigit():
    import torch

    _n = visible_count(os.environ.get("CUDA_VISIBLE_DEVICES"), int(_COUNT))
    torch.cuda.device_count = lambda: _n
    torch.cuda.is_available = lambda: _n > 0
