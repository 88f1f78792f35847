"""Run code in several processes joined by a ``torch.distributed`` process group, safely.

Used by the 07_multi_gpu checks and demos. Two rules make them dependable on any machine:

* **Safe start-up.** :func:`run_ranks` forks its ranks only where forking is safe
  (:func:`fork_is_safe`: no accelerator device in the process, so autograd has started no device
  threads); elsewhere it spawns them and rebuilds a function defined in a notebook from its source
  (:func:`portable`), so a notebook's function runs in ranks on any machine.
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

Run as ``python -m grader.runtime.distributed SCRIPT [ARGS...]`` (what :func:`run_torchrun` asks
torchrun to start in each worker), it runs SCRIPT's ``__main__`` block with ARGS and then
exits with :func:`exit_now`.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import inspect
import linecache
import multiprocessing
import os
import pickle
import runpy
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import types
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from grader.runtime.quiet import captured_stderr


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


def fork_is_safe() -> bool:
    """Whether ranks may be started with ``fork`` from this process.

    A forked child cannot run a backward pass once its parent's autograd engine has started its
    device threads: the engine then marks every fork child as bad, and the child's first
    ``backward()`` raises "Unable to handle autograd's threading in combination with fork-based
    multiprocessing". The engine starts those threads at the first backward of a process where
    any accelerator has a device (``Engine::start_device_threads`` in
    ``torch/csrc/autograd/engine.cpp``: one thread per device, none when every non-CPU device
    type counts 0 devices), whether or not CUDA was ever used. A notebook may have run a backward
    before (an earlier cell, a demo), so fork is safe only where there is no accelerator device
    at all. One case this cannot see: on a machine without a GPU, tracing with fake tensors
    (``torch.compile``, ``torch.export``, ``torch._dynamo.explain``) installs a stand-in CUDA
    device guard that counts one device, so a backward after it starts a device thread too;
    :func:`run_ranks` therefore starts the ranks again with spawn when forked ranks fail with
    that error.

    Returns:
        True on a machine without CUDA (or other accelerator) devices where ``fork`` exists.
    """
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    counts = [torch.cuda.device_count()]
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "device_count"):
        with contextlib.suppress(Exception):
            counts.append(accelerator.device_count())
    return all(count == 0 for count in counts)


def default_start_method() -> str:
    """``"fork"`` where :func:`fork_is_safe`, else ``"spawn"``."""
    return "fork" if fork_is_safe() else "spawn"


# --------------------------------------------------------------------------- functions by source
def _importable(obj: Any) -> bool:
    """True when a fresh process can import ``obj`` by its module and qualified name (what
    pickle does): its module is a real one, not ``__main__`` (a notebook) nor a namespace made
    at run time."""
    module_name = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module_name or not qualname or "<" in qualname or module_name == "__main__":
        return False
    module = sys.modules.get(module_name)
    spec = getattr(module, "__spec__", None)
    if module is None or spec is None or spec.origin is None:
        return False
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target is obj


def _global_names(code: types.CodeType) -> set[str]:
    """Names a code object (and the functions and classes nested in it) may read as globals."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _cell_text(filename: str) -> str | None:
    """The whole text of a notebook cell (or file) as the interpreter's line cache holds it
    (IPython registers every cell it runs there)."""
    lines = linecache.getlines(filename)
    return "".join(lines) if lines else None


class _Recipe:
    """What a fresh process needs to rebuild a notebook function (see :func:`function_recipe`)."""

    def __init__(self) -> None:
        self.imports: dict[str, tuple[str, str | None]] = {}
        self.values: dict[str, Any] = {}
        self.sources: list[tuple[str, int, str]] = []  # (file name, first line, source)
        self.cells: dict[str, str] = {}  # file name -> its whole text, for tracebacks
        self.aliases: list[tuple[str, str]] = []
        self._seen: set[int] = set()

    def add_global(self, name: str, value: Any) -> None:
        if name in self.imports or name in self.values:
            return
        if isinstance(value, types.ModuleType):
            self.imports[name] = (value.__name__, None)
        elif _importable(value):
            self.imports[name] = (value.__module__, value.__qualname__)
        elif inspect.isfunction(value) or inspect.isclass(value):
            self.visit(value)
            if value.__name__ != name:
                self.aliases.append((name, value.__name__))
        else:
            try:
                pickle.dumps(value)
            except Exception:  # noqa: BLE001 - cannot travel: the rank reports a NameError
                return
            self.values[name] = value

    def _add(self, filename: str, first: int, source: str) -> None:
        if any(f == filename and (n == first or n == 1) for f, n, _ in self.sources):
            return  # already there (or its whole cell is)
        self.sources.append((filename, first, source))
        cell = _cell_text(filename)
        if cell:
            self.cells[filename] = cell

    def visit(self, obj: Any) -> None:
        if id(obj) in self._seen:
            return
        self._seen.add(id(obj))
        functions = [obj] if inspect.isfunction(obj) else []
        if inspect.isclass(obj):
            for member in vars(obj).values():
                member = getattr(member, "__func__", member)
                if inspect.isfunction(member):
                    functions.append(member)
        for fn in functions:  # dependencies first: a class's bases, a decorator
            for name in sorted(_global_names(fn.__code__)):
                if name in fn.__globals__ and name != obj.__name__:
                    self.add_global(name, fn.__globals__[name])
        try:
            lines, first = inspect.getsourcelines(obj)
            filename = inspect.getsourcefile(obj) or inspect.getfile(obj)
        except (OSError, TypeError):
            # A class defined in a notebook (Python < 3.13 cannot find its source): run the
            # whole cell that defined its methods.
            files = sorted({fn.__code__.co_filename for fn in functions})
            if not files or any(_cell_text(f) is None for f in files):
                raise TypeError(f"the source of {obj.__name__!r} cannot be found") from None
            for filename in files:
                self._add(filename, 1, _cell_text(filename))
            return
        self._add(filename, max(first, 1), textwrap.dedent("".join(lines)))

    def as_dict(self, name: str) -> dict:
        return {
            "name": name,
            "imports": self.imports,
            "values": self.values,
            "sources": self.sources,
            "cells": self.cells,
            "aliases": self.aliases,
        }


def function_recipe(fn: Callable) -> dict:
    """How to rebuild ``fn`` (a function defined in a notebook, or in another namespace a fresh
    process cannot import) in a fresh process: its source and the sources of the notebook
    functions and classes it uses (from the interpreter's line cache, where IPython keeps every
    cell it runs), the modules and importable objects its globals name, and the values of its
    other globals where they pickle.

    Raises:
        TypeError: the source of ``fn``, or of a notebook function or class it uses, cannot be
            found.
    """
    if "<" in fn.__name__:
        raise TypeError(
            f"cannot run {fn.__name__} in a fresh process: define the function with def, by name"
        )
    recipe = _Recipe()
    try:
        recipe.visit(fn)
    except (OSError, TypeError) as exc:
        raise TypeError(f"cannot run {fn.__name__!r} in a fresh process: {exc}") from None
    return recipe.as_dict(fn.__name__)


def rebuild_function(recipe: dict) -> Callable:
    """The function a :func:`function_recipe` describes, defined in this (fresh) process."""
    namespace: dict[str, Any] = {"__name__": "__notebook__", "__builtins__": builtins}
    for name, (module, attribute) in recipe["imports"].items():
        value: Any = importlib.import_module(module)
        for part in attribute.split(".") if attribute else []:
            value = getattr(value, part)
        namespace[name] = value
    namespace.update(recipe["values"])
    for filename, text in recipe["cells"].items():
        # tracebacks raised in this process show the notebook's own lines
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    for filename, first, source in recipe["sources"]:
        code = compile("\n" * (first - 1) + source, filename, "exec", dont_inherit=True)
        exec(code, namespace)  # noqa: S102 - the notebook's own code, in its own process
    for alias, target in recipe["aliases"]:
        namespace[alias] = namespace[target]
    return namespace[recipe["name"]]


class SourceFunction:
    """A notebook function that travels to a spawned process by its source (see
    :func:`portable`); calling it there defines it (once) and calls it."""

    def __init__(self, fn: Callable) -> None:
        self.recipe = function_recipe(fn)
        self.__name__ = fn.__name__
        self._fn: Callable | None = fn

    def __getstate__(self) -> dict:
        return {"recipe": self.recipe, "__name__": self.__name__}

    def __setstate__(self, state: dict) -> None:
        self.recipe, self.__name__, self._fn = state["recipe"], state["__name__"], None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._fn is None:
            self._fn = rebuild_function(self.recipe)
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<function {self.__name__} (rebuilt from its source)>"


def portable(obj: Any) -> Any:
    """``obj`` ready to be pickled for a spawned process: a function or class a fresh process
    cannot import (defined in a notebook) becomes a :class:`SourceFunction`; anything else is
    returned as it is."""
    if (inspect.isfunction(obj) or inspect.isclass(obj)) and not _importable(obj):
        return SourceFunction(obj)
    return obj


def run_ranks(
    fn: Callable[..., Any],
    world_size: int = 2,
    *args: Any,
    backend: str = "gloo",
    timeout_s: float = 60.0,
    start_method: str | None = None,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` processes inside a process group.

    Each process initialises the group (``backend``, joined through a FileStore in a
    temporary folder), calls ``fn``, destroys the group and sends ``fn``'s return value
    back (anything ``torch.save`` can store: tensors, dicts, lists).

    Args:
        fn: The per-rank function. It may be defined anywhere, a notebook cell included: with
            ``spawn``, ``fn`` and the functions among ``args`` that a fresh process cannot
            import are rebuilt there from their source (:func:`portable`).
        world_size: Number of processes (ranks 0 .. world_size-1).
        *args: Passed to ``fn`` after ``rank`` and ``world_size``.
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (one GPU per rank).
        timeout_s: Deadline for the whole run, seconds; also the process group's timeout.
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"``; default
            :func:`default_start_method` (fork only where :func:`fork_is_safe`; forked ranks
            that fail because autograd cannot run in a fork child are started again with
            spawn).

    Returns:
        ``[result of rank 0, result of rank 1, ...]``.

    Raises:
        RanksFailed: a rank raised (its traceback is in the message), died, or had not
            finished after ``timeout_s`` seconds (it is killed).
        ValueError: ``world_size`` < 1.
        TypeError: a function to send to spawned ranks has no source to rebuild it from.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    method = start_method or default_start_method()
    # What the ranks and torch's launcher write to stderr (a rank's warnings, "Terminating
    # process ... via signal SIGTERM" when one fails) is shown on stdout: plain nbgrader scores
    # a test cell with any stderr output 0 (grader.runtime.quiet).
    with captured_stderr(show=True, label="the rank processes"):
        try:
            return _start_ranks(fn, world_size, args, backend, timeout_s, method)
        except RanksFailed as exc:
            if start_method is None and method == "fork" and _AUTOGRAD_FORK in str(exc):
                # The autograd engine had started device threads after all (see fork_is_safe):
                # start the ranks again, fresh.
                return _start_ranks(fn, world_size, args, backend, timeout_s, "spawn")
            raise


#: What a forked child's backward raises once its parent's autograd engine runs device threads.
_AUTOGRAD_FORK = "Unable to handle autograd's threading in combination with fork"


def _start_ranks(fn, world_size, args, backend, timeout_s, start_method) -> list[Any]:
    if start_method != "fork":
        fn = portable(fn)
        args = tuple(portable(a) for a in args)
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
    with captured_stderr(show=True, label="the rank processes"):  # as in run_ranks
        context = mp.start_processes(
            _script_main,
            args=(script, function, world_size, config),
            nprocs=world_size,
            join=False,
            start_method="spawn",
        )
        _join(
            context, world_size, time.monotonic() + timeout_s, f"{Path(script).name} with mp.spawn"
        )


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
    # Each worker runs `python -m grader.runtime.distributed SCRIPT ARGS`: the script's own __main__
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
    """``python -m grader.runtime.distributed SCRIPT [ARGS...]``: run SCRIPT as ``__main__``, then
    :func:`exit_now` (0 when it finished, its exit status on ``SystemExit``)."""
    if not argv:
        print("usage: python -m grader.runtime.distributed SCRIPT [ARGS...]", file=sys.stderr)
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
