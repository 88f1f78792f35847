"""A simulated GPU machine for Python processes started by a check (on a CPU-only machine).

Not imported by the course's processes: a check of ``visible_gpus`` (01_devices) puts this
folder on ``PYTHONPATH`` and sets ``GPU_COURSE_SIMULATED_GPUS=N`` while the student's function
runs, so a fresh Python process it starts with a copy of the environment sees a machine with
``N`` GPUs: ``torch.cuda.device_count()`` there counts ``CUDA_VISIBLE_DEVICES`` as CUDA does
(:func:`visible_count`), and ``torch.cuda.get_device_properties(i)`` /
``get_device_name(i)`` describe the physical GPU that CUDA makes ``cuda:i``
(:func:`visible_devices`), numbered as ``CUDA_DEVICE_ORDER`` says. Nothing changes in a
process without that variable.

The machine (:func:`machine`) mixes two kinds of GPU, so that CUDA's default order
(``FASTEST_FIRST``) differs from ``PCI_BUS_ID`` order, as it can on a real box with different
cards. Its names, bus ids and UUIDs are made up for the simulation.
"""

import os
import uuid

#: The variable that turns the simulation on, holding the number of simulated GPUs.
SIMULATED_GPUS_ENV = "GPU_COURSE_SIMULATED_GPUS"

#: The two kinds of simulated GPU: name, compute capability, SMs, memory in GiB.
_SLOW = ("NVIDIA A100-SXM4-40GB", 8, 0, 108, 40)
_FAST = ("NVIDIA H100 80GB HBM3", 9, 0, 132, 80)


class SimulatedProperties:
    """What ``torch.cuda.get_device_properties`` reports for one simulated GPU (the fields the
    course reads; ``uuid`` is a :class:`uuid.UUID`, whose ``str`` has the same form as torch's
    ``str(props.uuid)``: 8-4-4-4-12 hex digits, without nvidia-smi's ``GPU-`` prefix)."""

    def __init__(self, physical: int):
        name, major, minor, sms, gib = _FAST if physical % 2 else _SLOW
        self.name = name
        self.major = major
        self.minor = minor
        self.multi_processor_count = sms
        self.total_memory = gib * 2**30
        self.pci_domain_id = 0
        self.pci_bus_id = 0x18 + 0x23 * physical
        self.pci_device_id = 0
        self.uuid = uuid.uuid5(
            uuid.NAMESPACE_URL, f"https://example.invalid/gpu-course/simulated-gpu/{physical}"
        )

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // 2**20}MB, "
            f"multi_processor_count={self.multi_processor_count}, uuid={self.uuid}) (simulated)"
        )


def machine(total: int) -> list:
    """The simulated machine's GPUs in PCI bus order (physical index ``k`` is the ``k``-th bus):
    even ones are the slower kind (A100), odd ones the faster (H100)."""
    return [SimulatedProperties(k) for k in range(total)]


def enumeration(total: int, order) -> list:
    """Physical GPUs in the order CUDA numbers them before ``CUDA_VISIBLE_DEVICES`` applies.

    ``PCI_BUS_ID``: by PCI bus id. Otherwise (unset, or ``FASTEST_FIRST``, CUDA's default):
    CUDA's documentation only promises that the fastest GPU comes first ("leaving the order of
    the rest of the devices unspecified"); the simulation puts the faster kind first, each kind
    in bus order.
    """
    gpus = machine(total)
    if order == "PCI_BUS_ID":
        return list(range(total))
    return sorted(range(total), key=lambda k: (-gpus[k].major, -gpus[k].minor, k))


def visible_count(raw, total: int) -> int:
    """How many GPUs CUDA exposes for a ``CUDA_VISIBLE_DEVICES`` value on a ``total``-GPU machine.

    The rule of CUDA (CUDA C++ Programming Guide, "CUDA Environment Variables") as PyTorch
    reads it without initialising CUDA (``torch.cuda._parse_visible_devices`` and
    ``_device_count_nvml``): unset exposes every GPU; otherwise each comma-separated entry is
    read like ``strtoul`` (leading digits), a negative or unreadable entry ends the list, an
    index at or past ``total`` ends it too, and a repeated index exposes no GPU at all.
    Entries that are UUIDs (``GPU-...``) are counted by :func:`visible_devices`.

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


def _uuid_entries(raw: str, total: int, order) -> list:
    """Ordinals for a ``CUDA_VISIBLE_DEVICES`` list of UUIDs, as PyTorch reads one
    (``_parse_visible_devices`` and ``_transform_uuid_to_ordinals``): the list stops at the
    first entry without the ``GPU-`` prefix, or one that matches no GPU's UUID or more than one
    (a prefix of a UUID selects the GPU it starts); a repeated entry or GPU exposes none."""
    uuids = [f"GPU-{machine(total)[k].uuid}" for k in enumeration(total, order)]
    entries: list = []
    for entry in raw.split(","):
        if entry in entries:
            return []
        if not entry.startswith("GPU-"):
            break
        entries.append(entry)
    ordinals: list = []
    for entry in entries:
        matches = [i for i, u in enumerate(uuids) if u.startswith(entry)]
        if len(matches) != 1:
            break
        if matches[0] in ordinals:
            return []
        ordinals.append(matches[0])
    return ordinals


def visible_devices(raw, total: int, order=None) -> list:
    """The physical GPUs (indices in PCI bus order, see :func:`machine`) that a process started
    with ``CUDA_VISIBLE_DEVICES=raw`` and ``CUDA_DEVICE_ORDER=order`` sees as ``cuda:0``,
    ``cuda:1``, ...: the indices in ``raw`` count in ``order`` (:func:`enumeration`), and the
    visible GPUs are renumbered from 0 in the order ``raw`` lists them. Indices follow
    :func:`visible_count`'s rules; a list of UUIDs those of :func:`_uuid_entries`.

    Args:
        raw: ``CUDA_VISIBLE_DEVICES``, or None when it is unset.
        total: GPUs in the machine.
        order: ``CUDA_DEVICE_ORDER`` (None when unset: ``FASTEST_FIRST``).
    """
    numbering = enumeration(total, order)
    if raw is None:
        return numbering
    if raw.startswith("GPU-"):
        return [numbering[i] for i in _uuid_entries(raw, total, order)]
    count = visible_count(raw, total)
    ordinals = []
    for part in raw.split(",")[:count]:
        part = part.strip()
        n = len(part) - len(part.lstrip("+0123456789"))
        ordinals.append(int(part[:n]))
    return [numbering[i] for i in ordinals]


def device_lookup(devices: list, total: int):
    """``get_device_properties`` and ``get_device_name`` for a process that sees the physical
    GPUs ``devices`` as ``cuda:0``, ``cuda:1``, ... (an index, ``"cuda:1"``, a
    ``torch.device`` or None for the current device, ``cuda:0``)."""
    gpus = machine(total)

    def index_of(device) -> int:
        if device is None:
            return 0
        if isinstance(device, str):
            device = device.split(":", 1)[1] if ":" in device else None
        elif hasattr(device, "type"):  # a torch.device
            device = device.index
        index = 0 if device is None else int(device)
        if not 0 <= index < len(devices):
            raise AssertionError("Invalid device id")
        return index

    def get_device_properties(device=None):
        return gpus[devices[index_of(device)]]

    def get_device_name(device=None) -> str:
        return gpus[devices[index_of(device)]].name

    return get_device_properties, get_device_name


_COUNT = os.environ.get(SIMULATED_GPUS_ENV, "")
if _COUNT.isdigit():
    import torch

    _total = int(_COUNT)
    _seen = visible_devices(
        os.environ.get("CUDA_VISIBLE_DEVICES"), _total, os.environ.get("CUDA_DEVICE_ORDER")
    )
    _n = len(_seen)
    torch.cuda.device_count = lambda: _n
    torch.cuda.is_available = lambda: _n > 0
    torch.cuda.get_device_properties, torch.cuda.get_device_name = device_lookup(_seen, _total)
