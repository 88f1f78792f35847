"""Run code in several processes joined by a ``torch.distributed`` process group, safely.

Used by the 07_multi_gpu checks and demos. Two rules make them dependable on any machine:

* **No fixed port.** :func:`run_ranks` joins the ranks through a ``FileStore`` in a fresh
  temporary folder (``init_method="file://..."``), so two gradings on one machine never
  collide; :func:`run_torchrun` uses ``torchrun --standalone``, which picks a free port.
* **No hang.** Every run has a deadline. A rank that raises ends the run at once with its
  traceback (the other ranks are terminated); ranks still running at the deadline, such
  as a rank waiting in a collective that another rank never calls, are killed and
  reported by number.
* **No abort at exit.** A rank whose work is done leaves with ``os._exit`` instead of a
  normal interpreter shutdown (see :func:`exit_now`): after DDP has run on gloo, the
  process group's worker threads outlive ``destroy_process_group`` (the DDP reducer keeps
  the group alive) and may release a Python object while the interpreter shuts down,
  which aborts the process with "terminate called without an active exception"
  (measured here: about 1 run in 30 for the reference script, 1 in 7 for a script
  without ``dist.barrier()``; the PyTorch issue is discussed in pytorch/pytorch#179291).
  Processes started with fork already leave this way (``multiprocessing`` ends a forked
  child with ``os._exit``); spawned ranks and torchrun workers do it through this module.

Run as ``python -m grader.distributed SCRIPT [ARGS...]`` (what :func:`run_torchrun` asks
torchrun to start in each worker), it runs SCRIPT's ``__main__`` block with ARGS and then
exits with :func:`exit_now`.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class RanksFailed(RuntimeError):
    """A rank raised, crashed or did not finish in time (the message says which and why)."""


def _rank_main(rank, fn, world_size, backend, store, outdir, timeout_s, args):
    torch.set_num_threads(1)  # ranks share the machine's cores
    dist.init_process_group(
        backend,
        init_method=f"file://{store}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout_s),
    )
    try:
        result = fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()
    torch.save(result, os.path.join(outdir, f"rank{rank}.pt"))


def _join(context, nprocs: int, deadline: float, what: str) -> None:
    """Wait for a ``ProcessContext`` until ``deadline``; raise :class:`RanksFailed` on failure."""
    try:
        while not context.join(timeout=0.1):
            if time.monotonic() > deadline:
                alive = [i for i, p in enumerate(context.processes) if p.is_alive()]
                for p in context.processes:
                    if p.is_alive():
                        p.kill()
                for p in context.processes:
                    p.join(5)
                raise RanksFailed(
                    f"{what}: rank(s) {alive} of {nprocs} had not finished at the deadline and "
                    "were stopped. A rank waiting forever usually means the ranks did not call the "
                    "same collectives in the same order (e.g. only rank 0 calls all_reduce)."
                )
    except mp.ProcessRaisedException as exc:
        raise RanksFailed(f"{what}: rank {exc.error_index} raised:\n{exc.msg}") from None
    except mp.ProcessExitedException as exc:
        how = f"signal {exc.signal_name}" if exc.signal_name else f"exit code {exc.exit_code}"
        raise RanksFailed(f"{what}: rank {exc.error_index} died ({how})") from None


def run_ranks(
    fn: Callable[..., Any],
    world_size: int = 2,
    *args: Any,
    backend: str = "gloo",
    timeout_s: float = 60.0,
    start_method: str = "fork",
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` processes inside a process group.

    Each process initialises the group (``backend``, joined through a FileStore in a
    temporary folder), calls ``fn``, destroys the group and sends ``fn``'s return value
    back (anything ``torch.save`` can store: tensors, dicts, lists).

    Args:
        fn: The per-rank function. With ``start_method="fork"`` (the default) it may be
            defined anywhere, a notebook cell included; with ``"spawn"`` it must be
            importable (defined in a module), as for ``torch.multiprocessing.spawn``.
        world_size: Number of processes (ranks 0 .. world_size-1).
        *args: Passed to ``fn`` after ``rank`` and ``world_size``.
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (one GPU per rank).
        timeout_s: Deadline for the whole run, seconds; also the process group's timeout.
        start_method: ``"fork"`` or ``"spawn"``.

    Returns:
        ``[result of rank 0, result of rank 1, ...]``.

    Raises:
        RanksFailed: a rank raised (its traceback is in the message), died, or had not
            finished after ``timeout_s`` seconds (it is killed).
        ValueError: ``world_size`` < 1.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    tmp = tempfile.mkdtemp(prefix="gpu-course-ranks-")
    try:
        with warnings.catch_warnings():
            # Python 3.12+ warns that fork() in a multi-threaded process (a Jupyter kernel)
            # may deadlock; the ranks touch no lock the kernel's threads hold, and the
            # deadline below ends any run that does hang.
            warnings.simplefilter("ignore", DeprecationWarning)
            context = mp.start_processes(
                _rank_main,
                args=(fn, world_size, backend, os.path.join(tmp, "store"), tmp, timeout_s, args),
                nprocs=world_size,
                join=False,
                start_method=start_method,
            )
        _join(context, world_size, time.monotonic() + timeout_s, f"{world_size} {backend} ranks")
        return [
            torch.load(os.path.join(tmp, f"rank{r}.pt"), weights_only=False)
            for r in range(world_size)
        ]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def exit_now(code: int = 0) -> None:
    """End this process at once with ``code``, after flushing stdout and stderr.

    Skips the interpreter's shutdown (no ``atexit`` handlers, no finalizers), which is
    what a rank whose work is done needs: see the module docstring ("No abort at exit").
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _script_main(rank, script, function, world_size, config):
    torch.set_num_threads(1)
    module = load_script(script)
    getattr(module, function)(rank, world_size, config)
    exit_now(0)  # the function returned: leave before the interpreter's shutdown can abort


def load_script(path: str | Path):
    """Import a Python file as a fresh module (its ``if __name__ == "__main__":`` block does
    not run), whatever its folder; a second call re-reads the file.

    Raises:
        FileNotFoundError: no such file.
    """
    import importlib.util

    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no script at {path}: run the cell that writes it first")
    spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def spawn_script(
    script: str | Path,
    world_size: int,
    config: dict,
    *,
    function: str = "ddp_train",
    timeout_s: float = 120.0,
) -> None:
    """Start ``function(rank, world_size, config)`` of ``script`` in ``world_size`` processes
    with ``torch.multiprocessing`` (start method ``spawn``), as ``mp.spawn`` does, with a
    deadline. The function initialises its own process group (e.g. from
    ``config["init_method"]``).

    Raises:
        RanksFailed: a rank raised, died, or had not finished after ``timeout_s`` seconds.
        FileNotFoundError: the script does not exist.
    """
    script = str(Path(script).resolve())
    if not os.path.isfile(script):
        raise FileNotFoundError(f"no script at {script}: run the cell that writes it first")
    context = mp.start_processes(
        _script_main,
        args=(script, function, world_size, config),
        nprocs=world_size,
        join=False,
        start_method="spawn",
    )
    _join(context, world_size, time.monotonic() + timeout_s, f"{Path(script).name} with mp.spawn")


def torchrun_command(script: str | Path, nproc: int, *script_args: str) -> list[str]:
    """The ``torchrun`` command line for one machine, as a list for ``subprocess``.

    ``--standalone`` runs a local rendezvous on a free port (no fixed port to collide on);
    ``python -m torch.distributed.run`` is ``torchrun`` without relying on ``PATH``.
    """
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        "--max-restarts=0",
        str(script),
        *map(str, script_args),
    ]


def run_torchrun(
    script: str | Path, nproc: int, *script_args: str, timeout_s: float = 180.0
) -> subprocess.CompletedProcess:
    """Run ``script`` under ``torchrun`` with ``nproc`` processes; return the finished process.

    Raises:
        RanksFailed: torchrun exited non-zero (its output's end is in the message) or
            did not finish within ``timeout_s`` seconds (it and its workers are killed).
    """
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    # Each worker runs `python -m grader.distributed SCRIPT ARGS`: the script's own __main__
    # block, then a clean exit (module docstring, "No abort at exit").
    command = torchrun_command(script, nproc, *script_args)
    at = command.index(str(script))
    command[at:at] = ["-m", __name__]
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # one process group: the agent and its workers
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # SIGTERM lets the torchrun agent stop its workers (they run in sessions of their
            # own, so killing the agent's process group would leave them holding the pipe).
            proc.terminate()
            try:
                out, _ = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                out = ""
            raise RanksFailed(
                f"torchrun {Path(script).name}: not finished after {timeout_s:.0f} s, stopped. "
                f"Last output:\n{out[-3000:]}"
            ) from None
    if proc.returncode != 0:
        raise RanksFailed(
            f"torchrun {Path(script).name} exited with code {proc.returncode}. "
            f"Last output:\n{out[-4000:]}"
        )
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def _main(argv: list[str]) -> None:
    """``python -m grader.distributed SCRIPT [ARGS...]``: run SCRIPT as ``__main__``, then
    :func:`exit_now` (0 when it finished, its exit status on ``SystemExit``)."""
    if not argv:
        print("usage: python -m grader.distributed SCRIPT [ARGS...]", file=sys.stderr)
        exit_now(2)
    script = str(Path(argv[0]).resolve())
    sys.argv = [script, *argv[1:]]
    sys.path.insert(0, os.path.dirname(script))  # as `python SCRIPT` does
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        exit_now(code or 0)
    exit_now(0)


if __name__ == "__main__":
    _main(sys.argv[1:])
