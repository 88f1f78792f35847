"""How a class is graded: parallelism, limits, isolation (:class:`GradingOptions`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil


@dataclass
class GradingOptions:
    """How to grade a class.

    Attributes:
        jobs: Submissions graded at the same time (separate processes and kernels).
        cell_timeout: Seconds one cell may run before it is interrupted (scores 0).
        notebook_timeout: Seconds for a whole notebook; cells not reached score 0.
        memory_gb: Memory limit of each kernel, GB (address space on a CPU-only machine,
            resident memory on a GPU machine).
        gpu_fraction: Share of each GPU's memory one kernel may use.
        output_kib: Printed output kept per cell, KiB.
        isolate: Run kernels in the bubblewrap sandbox when it is available.
        regrade: Grade again submissions already graded with the same content.
        cpu_ok: Without a GPU, accept that CUDA-only cells score 0.
        rerun_demos: Re-run unchanged ``demo``-tagged teaching cells too (slower; the scores
            are the same, as those cells define nothing the checks read).
        cells: Which test cells to grade: ``"all"``, ``"cuda"`` (only ``_cuda`` cells: a GPU
            node's share) or ``"no-cuda"`` (all but those: a CPU node's share). Cells left out
            are *deferred*: ``python -m grader merge`` takes their scores from the machine that
            graded them.
        gpu: Whether the grading machine has a CUDA GPU (None: ask torch where the job runs).
        allow_root_unsandboxed: Grade as root without the bubblewrap sandbox (kernels then run
            as root: :func:`grader.grading.pipeline.autograde` refuses that otherwise).
        disk_gb: Disk quota of each kernel, GB: its folder, home, ``/tmp`` and ``/dev/shm``
            in all (:mod:`grader.grading.quota`).
        processes: Processes and threads each kernel may have at once (where the machine can
            enforce it: :mod:`grader.grading.quota`).
        log_kib: Log kept of each job's stdout and stderr (its kernels' included), KiB: half
            from the start, half from the end.
    """

    jobs: int = 1
    cell_timeout: int = 600
    notebook_timeout: int = 3600
    memory_gb: float = 8.0
    gpu_fraction: float = 1.0
    output_kib: int = 512
    isolate: bool = True
    regrade: bool = False
    cpu_ok: bool = False
    rerun_demos: bool = False
    cells: str = "all"
    gpu: bool | None = None
    allow_root_unsandboxed: bool = False
    disk_gb: float = 4.0
    processes: int = 1024
    log_kib: int = 1024

    @property
    def has_gpu(self) -> bool:
        """Whether this machine grades with a CUDA GPU (``gpu``, else asked of torch once)."""
        if self.gpu is None:
            import torch

            self.gpu = torch.cuda.is_available()
        return self.gpu

    @classmethod
    def for_machine(cls, jobs: int | None = None, **overrides) -> GradingOptions:
        """Defaults for this machine: one job per two cores (at most 8; at most 4 on a GPU,
        which the jobs share), memory split between the jobs (at most 16 GB each), GPU memory
        split between the jobs."""
        cores = os.cpu_count() or 1
        import torch

        gpu = torch.cuda.is_available()
        if jobs is None:
            jobs = max(1, min(8 if not gpu else 4, cores // 2 or 1))
        total_gb = psutil.virtual_memory().total / 1e9
        memory = min(16.0, max(2.0, 0.8 * total_gb / jobs))
        options = cls(
            jobs=jobs, memory_gb=round(memory, 1), gpu_fraction=0.9 / jobs if gpu else 1, gpu=gpu
        )
        for key, value in overrides.items():
            if value is not None:
                setattr(options, key, value)
        return options
