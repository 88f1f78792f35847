"""Datasets the notebooks train on: the real one when it can be had, a labelled stand-in when not.

Machines without internet access (CI, many clusters' compute nodes) cannot download
CIFAR-10. The course then trains on ``torchvision.datasets.FakeData`` of the same shape
and says so in a visible notice, so every cell still runs and nobody mistakes the
stand-in's accuracy for CIFAR-10's.
"""

from __future__ import annotations

import os
import socket
import urllib.error
from pathlib import Path

import torchvision
from torch.utils.data import Dataset

#: Where datasets are downloaded: ``$GPU_COURSE_DATA``, else ``~/.cache/gpu-course/data``
#: (outside the repository, so a 163 MB download never lands in a release or a commit).
DATA_ROOT = Path(os.environ.get("GPU_COURSE_DATA", Path.home() / ".cache" / "gpu-course" / "data"))

#: Seconds a download may wait on the network before the stand-in is used.
DOWNLOAD_TIMEOUT_S = 20.0


def cifar10(
    root: str | Path,
    *,
    train: bool = True,
    transform=None,
    download: bool = True,
    fake_size: int = 1024,
) -> tuple[Dataset, str]:
    """CIFAR-10 from ``torchvision.datasets.CIFAR10``, or ``FakeData`` with a notice.

    Args:
        root: Folder holding (or receiving) ``cifar-10-batches-py``.
        train: The 50,000-image training split (True) or the 10,000-image test split.
        transform: Applied to each PIL image, e.g. ``torchvision.transforms.ToTensor()``.
        download: Download the 163 MB archive when it is not in ``root`` yet.
        fake_size: Number of images of the stand-in when CIFAR-10 cannot be had.

    Returns:
        ``(dataset, name)``: items are ``(image, label)`` with 3x32x32 images and 10
        classes; ``name`` is ``"CIFAR-10"`` or ``"FakeData (CIFAR-10 could not be
        loaded)"`` so that plots and logs can say what was trained on.
    """
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)  # torchvision's urllib calls have none
    try:
        dataset = torchvision.datasets.CIFAR10(
            str(root), train=train, transform=transform, download=download
        )
        return dataset, "CIFAR-10"
    except (OSError, RuntimeError, urllib.error.URLError) as exc:
        reason = " ".join(str(exc).split())[:200]
    finally:
        socket.setdefaulttimeout(previous)
    print(
        "NOTICE: CIFAR-10 could not be loaded "
        f"({reason}).\n"
        f"        Training on FakeData instead: {fake_size} random 3x32x32 images in 10 classes. "
        "Losses and timings are real; accuracies mean nothing.\n"
        "        Run this where https://www.cs.toronto.edu is reachable (or put "
        f"cifar-10-batches-py in {root}) for the real dataset."
    )
    fake = torchvision.datasets.FakeData(
        size=fake_size,
        image_size=(3, 32, 32),
        num_classes=10,
        transform=transform,
        random_offset=0 if train else 10**6,
    )
    return fake, "FakeData (CIFAR-10 could not be loaded)"
