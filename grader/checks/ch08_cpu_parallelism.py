"""Checks for 08_cpu_parallelism: parallel_map, seed_worker, loader_speedup.

CI machines have 2 cores, so these checks judge **behaviour** wherever speed cannot show:
which processes or threads ran the work, how many tasks ran at once (from the tasks' own
start and end times), in which order results come back, which worker produced which
number. The one speed check (:func:`check_loader_speedup`) uses a dataset that *sleeps*
(I/O-bound, so it needs no free cores) and compares the student's ratio with the
reference's measured in the same run.

The checks reach the student's code through :mod:`grader.runtime.remote`: the ``_probe_*`` functions run
the student's function in the student's process (the pools, the DataLoader workers and the
timing happen there, with the module-level tasks and datasets below, which any worker can
unpickle) and hand back what they observed as plain data: results, process and thread ids,
start and end times, the numbers each worker drew, the measured ratio. Every verdict, and the
reference's measurement, is made here.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from grader.checks.common import call_student, fail, not_attempted, passed, require
from grader.runtime import handover
from grader.runtime.course import reference
from grader.runtime.remote import Recorded, attempt, kernel_side, outcome, student

ASSIGNMENT = "08_cpu_parallelism"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True


# --------------------------------------------------------------------------- parallel_map
class WorkerError(ValueError):
    """Raised on purpose inside a worker by the checks (a ValueError subclass)."""


@kernel_side
def square(x):
    """``x * x``: a task for the checks (module-level, so processes can unpickle it)."""
    return x * x


@kernel_side
def fail_on_three(x):
    """Return ``x``; raise :class:`WorkerError` for ``x == 3``."""
    if x == 3:
        raise WorkerError(f"item {x} is broken")
    return x


@kernel_side
def timed_sleep(item):
    """Sleep ``item[1]`` seconds; return ``(item[0], pid, thread id, start, end)``.

    ``start`` and ``end`` are ``time.monotonic()`` seconds, one clock for every process
    of the machine, so the checks can count how many tasks overlapped.
    """
    index, seconds = item
    start = time.monotonic()
    time.sleep(seconds)
    return index, os.getpid(), threading.get_ident(), start, time.monotonic()


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The largest number of ``(start, end)`` intervals open at the same moment."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    running = best = 0
    for _, step in events:
        running += step
        best = max(best, running)
    return best


def _probe_parallel_map(parallel_map, fn, items, workers: int, backend: str) -> dict:
    """Probe: one call of the student's ``parallel_map`` (its outcome as an attempt record) and
    the id of the process it ran in."""
    return {
        "record": attempt(parallel_map, fn, items, workers=workers, backend=backend),
        "pid": os.getpid(),
    }


def _call_label(fn, items, workers: int, backend: str) -> str:
    shown = f"range({len(items)})" if isinstance(items, range) else "items"
    return f"parallel_map({fn.__name__}, {shown}, workers={workers}, backend={backend!r})"


def _map(parallel_map, fn, items, workers, backend) -> tuple:
    """The student's result for one call (raises CheckFailed for an exception), and the id of
    the student's process."""
    seen = parallel_map.probe(_probe_parallel_map, fn, items, workers, backend)
    got = call_student(
        Recorded("parallel_map", [((), {})], [seen["record"]]),
        name=_call_label(fn, items, workers, backend),
    )
    return got, seen["pid"]


def _check_values(parallel_map, backend: str, n: int, workers: int) -> None:
    got, _ = _map(parallel_map, square, range(n), workers, backend)
    expected = [i * i for i in range(n)]
    require(
        isinstance(got, list) and got == expected,
        f"parallel_map(square, range({n}), workers={workers}, backend={backend!r})",
        yours=got,
        expected=expected,
        cause="return a list with fn(item) for every item, in the order of the items",
    )


def _check_order_and_concurrency(parallel_map, backend: str, workers: int) -> None:
    # The first items sleep longest, so they finish last: completion order is reversed.
    durations = [0.45, 0.35, 0.25, 0.15, 0.05, 0.0]
    items = list(enumerate(durations))
    got, pid = _map(parallel_map, timed_sleep, items, workers, backend)
    require(
        isinstance(got, list)
        and len(got) == len(items)
        and all(isinstance(r, tuple) and len(r) == 5 for r in got),
        f"parallel_map over {len(items)} items must return {len(items)} results",
        yours=f"{type(got).__name__} of {len(got)}" if isinstance(got, (list, tuple)) else got,
        expected=f"list of {len(items)}",
        cause="collect one result per item",
    )
    order = [r[0] for r in got]
    require(
        order == list(range(len(items))),
        f"order of the results (backend={backend!r}; items that sleep longer finish later)",
        yours=order,
        expected=list(range(len(items))),
        cause="return results in the order of the items, not in the order the workers finish: "
        "executor.map, or futures kept in a list and read in that order",
    )
    pids = {r[1] for r in got}
    if backend == "process":
        require(
            pid not in pids,
            "backend='process' must run fn in other processes",
            yours=f"pids {sorted(pids)} (the calling process is {pid})",
            expected="pids other than the calling process's",
            cause="use concurrent.futures.ProcessPoolExecutor (or multiprocessing.Pool)",
        )
    else:
        require(
            pids == {pid},
            "backend='thread' must run fn in threads of the calling process",
            yours=f"pids {sorted(pids)} (the calling process is {pid})",
            expected=f"only {pid}",
            cause="use concurrent.futures.ThreadPoolExecutor for backend='thread'",
        )
    overlap = max_overlap([(r[3], r[4]) for r in got])
    low = min(2, workers)
    require(
        low <= overlap <= workers,
        f"largest number of tasks running at the same time with workers={workers} "
        f"(backend={backend!r}, measured from the tasks' start and end times)",
        yours=overlap,
        expected=f"between {low} and {workers}" if low < workers else f"{workers}",
        cause="submit every item to a pool of exactly `workers` workers "
        "(max_workers=workers / processes=workers) before waiting for any result"
        if overlap > workers
        else "submit every item before waiting for any result; calling fn in a loop runs one at a time",
    )


#: How the checks' own exception class is named in a handed-over exception.
_WORKER_ERROR = f"{WorkerError.__module__}.{WorkerError.__qualname__}"


def _raised(record: dict, label: str):
    """The exception a recorded call raised (rebuilt), None when it returned; a stub's bare
    NotImplementedError is reported as not attempted."""
    try:
        outcome(record)
    except NotImplementedError as exc:
        if not exc.args:
            raise not_attempted(label) from None
        return exc
    except Exception as exc:  # noqa: BLE001 - the exception is what the check looks at
        return exc
    return None


def _check_exception(parallel_map, backend: str) -> None:
    what = (
        f"parallel_map(fn, range(6), workers=2, backend={backend!r}) where fn(3) raises WorkerError"
    )
    cause = (
        "let the worker's exception reach the caller: future.result() and executor.map "
        "re-raise it with its original type; do not catch it or wrap it in another type"
    )
    seen = parallel_map.probe(_probe_parallel_map, fail_on_three, range(6), 2, backend)
    exc = _raised(seen["record"], "parallel_map")
    if exc is None:
        fail(
            what,
            yours=f"returned {outcome(seen['record'])!r}",
            expected="raises WorkerError",
            cause=cause,
        )
    types = getattr(exc, "remote_types", [])
    require(
        _WORKER_ERROR in types,
        what,
        yours=f"raised {handover.exception_name(exc)}: {exc}",
        expected="raises WorkerError",
        cause=cause,
    )
    require(
        "item 3 is broken" in str(exc),
        f"{what}: the message of the re-raised exception",
        yours=str(exc),
        expected="item 3 is broken",
        cause="re-raise the worker's exception itself",
    )


def check_parallel_map(parallel_map) -> None:
    """Both backends: values and input order (the first items finish last), where the work
    ran (other processes / threads of the calling process), how many tasks ran at once
    (between 2 and ``workers``), and a worker's exception re-raised with its type; an unknown
    backend raises ValueError.

    Raises:
        CheckFailed: on the first behaviour that differs from the exercise.
    """
    parallel_map = student(parallel_map, "parallel_map")
    for backend in ("thread", "process"):
        _check_values(parallel_map, backend, n=20, workers=3)
        _check_order_and_concurrency(parallel_map, backend, workers=3)
        _check_exception(parallel_map, backend)
    seen = parallel_map.probe(_probe_parallel_map, square, [1, 2], 2, "gpu")
    exc = _raised(seen["record"], "parallel_map")
    require(
        isinstance(exc, ValueError),
        "parallel_map(..., backend='gpu') must raise ValueError",
        yours="returned normally"
        if exc is None
        else f"raised {handover.exception_name(exc)}: {exc}",
        expected="raises ValueError",
        cause="raise ValueError for a backend other than 'process' or 'thread'",
    )
    passed("parallel_map keeps input order, runs up to `workers` tasks at once, re-raises errors")


def check_parallel_map_hidden(parallel_map) -> None:
    """Empty input, one worker, an iterator as input, many items, ``None`` results, and one
    task at a time with ``workers=1``."""
    parallel_map = student(parallel_map, "parallel_map")
    for backend in ("thread", "process"):
        got, _ = _map(parallel_map, square, [], 2, backend)
        require(
            got == [],
            f"parallel_map over no items ({backend})",
            yours=got,
            expected=[],
            cause="return an empty list",
        )
        _check_values(parallel_map, backend, n=150, workers=4)
        got, _ = _map(parallel_map, square, iter(range(7)), 2, backend)
        require(
            got == [i * i for i in range(7)],
            f"parallel_map over an iterator (backend={backend!r})",
            yours=got,
            expected=[i * i for i in range(7)],
            cause="items may be any iterable: consume it once (list(items))",
        )
        got, _ = _map(parallel_map, print_nothing, range(3), 1, backend)
        require(
            got == [None] * 3,
            f"fn returning None ({backend})",
            yours=got,
            expected=[None] * 3,
            cause="keep None results",
        )
        _check_order_and_concurrency(parallel_map, backend, workers=2)
        # one worker: one task at a time, whatever the machine's core count (a pool left at
        # its default size runs os.cpu_count() of them)
        _check_order_and_concurrency(parallel_map, backend, workers=1)
    passed("parallel_map handles empty input, iterators, one worker and many items")


@kernel_side
def print_nothing(x):
    """Return None (a task without a result)."""
    return None


# --------------------------------------------------------------------------- seed_worker
class NoisyDataset(Dataset):
    """A dataset that draws a random number per item from its **own** NumPy generator.

    Items are ``(worker id, number)``; the worker id is -1 in the main process. The
    generator is the attribute ``rng`` (``numpy.random.Generator``). Worker processes get a
    copy of the dataset as it was when they started (fork copies memory; spawn pickles),
    so without a ``worker_init_fn`` every worker draws the same numbers.
    """

    def __init__(self, n: int = 12, seed: int = 0):
        self.n = n
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        info = get_worker_info()
        return (info.id if info is not None else -1, float(self.rng.random()))


def start_method() -> str:
    """``"fork"`` where the platform has it (Linux: what DataLoader uses by default),
    else ``"spawn"``."""
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def noisy_numbers(worker_init_fn, *, loader_seed: int, workers: int = 2, n: int = 12) -> dict:
    """Numbers drawn by each DataLoader worker from a :class:`NoisyDataset`.

    Args:
        worker_init_fn: Passed to ``DataLoader`` (``None`` for none).
        loader_seed: Seed of the loader's ``torch.Generator`` (which sets the workers' seeds).
        workers: ``num_workers``.
        n: Items in the dataset (dealt to the workers in turn).

    Returns:
        Worker id -> the numbers that worker produced, in order.
    """
    with warnings.catch_warnings():
        # more workers than cores is fine here: the workers hardly compute
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        return _worker_numbers(worker_init_fn, loader_seed, workers, n)


def _worker_numbers(worker_init_fn, loader_seed: int, workers: int, n: int) -> dict:
    loader = DataLoader(
        NoisyDataset(n),
        batch_size=None,
        num_workers=workers,
        worker_init_fn=worker_init_fn,
        generator=torch.Generator().manual_seed(loader_seed),
        multiprocessing_context=start_method(),
    )
    out: dict[int, list[float]] = {}
    for worker, number in loader:
        out.setdefault(int(worker), []).append(float(number))
    return out


def _probe_seed_worker(seed_worker, loader_seeds: list[int], workers: int) -> list:
    """Probe: the numbers each DataLoader worker draws with ``worker_init_fn=seed_worker``, one
    run per loader seed; a run that fails hands back the DataLoader's report as text."""
    runs = []
    for seed in loader_seeds:
        try:
            runs.append({"numbers": noisy_numbers(seed_worker, loader_seed=seed, workers=workers)})
        except Exception as exc:  # noqa: BLE001 - DataLoader reports a worker's error
            runs.append({"error": f"{type(exc).__name__}: {exc}"})
    return runs


def _numbers(run: dict) -> dict:
    if "error" in run:
        text = run["error"]
        if "NotImplementedError" in text and "raise NotImplementedError()" in text:
            raise not_attempted("seed_worker")
        fail(
            "a DataLoader with worker_init_fn=seed_worker",
            yours=text.strip().splitlines()[-1][:300],
            expected="every worker starts",
            cause="seed_worker runs inside each worker: use torch.utils.data.get_worker_info()",
        )
    return run["numbers"]


def _check_seed_worker(seed_worker, workers: int, seeds: tuple[int, int]) -> None:
    runs = seed_worker.probe(_probe_seed_worker, [seeds[0], seeds[0], seeds[1]], workers)
    first = _numbers(runs[0])
    streams = [tuple(first.get(w, [])) for w in range(workers)]
    shared = [
        (a, b)
        for a, b in itertools.combinations(range(workers), 2)
        if set(streams[a]) & set(streams[b])
    ]
    require(
        not shared,
        f"numbers drawn by the dataset's own numpy Generator in {workers} DataLoader workers",
        yours={f"worker {w}": [round(v, 4) for v in streams[w][:3]] for w in range(workers)},
        expected="a different stream in every worker",
        cause="every worker starts with a copy of the same Generator: in seed_worker replace "
        "get_worker_info().dataset.rng with np.random.default_rng(get_worker_info().seed) "
        "(seeding NumPy's global np.random does not touch the dataset's own Generator)",
    )
    again = _numbers(runs[1])
    require(
        again == first,
        f"two runs of the loader with the same generator seed ({seeds[0]})",
        yours=f"worker 0 drew {[round(v, 4) for v in first.get(0, [])[:3]]} then "
        f"{[round(v, 4) for v in again.get(0, [])[:3]]}",
        expected="the same numbers both times",
        cause="derive the worker's seed from the loader (get_worker_info().seed or "
        "torch.initial_seed() inside the worker), not from fresh entropy or the clock",
    )
    other = _numbers(runs[2])
    require(
        other != first,
        f"two runs of the loader with different generator seeds ({seeds[0]} and {seeds[1]})",
        yours="the same numbers both times",
        expected="different numbers (every epoch draws new random augmentations)",
        cause="seed with get_worker_info().seed, which changes with the loader's generator and "
        "every epoch; seeding with the worker id alone repeats the same numbers every epoch",
    )


def check_seed_worker(seed_worker) -> None:
    """Two DataLoader workers over :class:`NoisyDataset`: different numbers in each worker, the
    same numbers for the same loader seed, different numbers for another seed.

    Raises:
        CheckFailed: workers repeat each other, or the numbers are not reproducible.
    """
    seed_worker = student(seed_worker, "seed_worker")
    _check_seed_worker(seed_worker, workers=2, seeds=(0, 1))
    passed("seed_worker: a distinct, reproducible stream per worker, new numbers per seed")


def check_seed_worker_hidden(seed_worker) -> None:
    """Three workers, other seeds."""
    seed_worker = student(seed_worker, "seed_worker")
    _check_seed_worker(seed_worker, workers=3, seeds=(7, 123))
    passed("seed_worker gives 3 workers distinct, reproducible streams")


# --------------------------------------------------------------------------- loader_speedup
class SleepyDataset(Dataset):
    """An I/O-bound dataset: each item waits ``ms`` milliseconds (like a read from a network
    disk) and returns its index as a tensor. Every request (a DataLoader asks for a batch at
    once) also appends the pid of the process that served it and the number of items to
    ``log`` (a file), so a check can see how many workers did the work, in which batch sizes.
    Waiting needs no CPU, so workers speed it up even on a machine with few cores.
    """

    def __init__(self, n: int = 256, ms: float = 10.0, log: str | os.PathLike | None = None):
        self.n, self.ms, self.log = n, ms, str(log) if log else None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        """A batch's items (a DataLoader asks for a whole batch at once through this, since
        torch 2.0); logs ``pid size`` once per request."""
        time.sleep(self.ms / 1000 * len(indices))
        if self.log:
            with open(self.log, "a") as f:
                f.write(f"{os.getpid()} {len(indices)}\n")
        return [torch.tensor(i) for i in indices]


def number_attempt(fn, *args, **kwargs) -> dict:
    """:func:`grader.runtime.remote.attempt` for a function that returns a number (inside a probe): a
    subclass of ``float`` or ``int`` (NumPy's ``float64``, say) is handed back as a plain
    ``float``, with its type's name in ``"type"``; anything else as :func:`attempt` does."""
    try:
        value = fn(*args, **kwargs)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the outcome is the record
        return {"ok": False, "error": handover.describe(exc)}
    kind = type(value)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {"ok": True, "value": float(value), "type": name}
    return {"ok": True, "value": None, "type": name, "repr": " ".join(repr(value).split())[:80]}


def _probe_loader_speedup(loader_speedup, n: int, ms: float, batch_size: int, workers: int) -> dict:
    """Probe: the student's ``loader_speedup`` on a :class:`SleepyDataset` that logs which
    process served each item; hands back the ratio, the logged pids and the calling pid."""
    with tempfile.TemporaryDirectory(prefix="loader-speedup-") as tmp, warnings.catch_warnings():
        # more workers than cores is the point here: they wait, they hardly compute
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        log = Path(tmp) / "pids.txt"
        record = number_attempt(loader_speedup, SleepyDataset(n, ms, log), batch_size, workers)
        lines = log.read_text().splitlines() if log.is_file() else []
    requests = [line.split() for line in lines]
    return {
        "record": record,
        "pids": [r[0] for r in requests],
        "sizes": [int(r[1]) for r in requests],
        "pid": str(os.getpid()),
    }


def _require_ratio(record: dict, label: str, cause: str) -> float:
    """The number a :func:`number_attempt` record holds (an exception in it fails the check)."""
    value = call_student(Recorded(label, [((), {})], [record]), name=label)
    require(
        value is not None and math.isfinite(value),
        f"{label} must return a float (a ratio of throughputs)",
        yours=f"{record.get('repr', value)!r} ({record.get('type')})",
        expected="a float such as 3.2",
        cause=cause,
    )
    return float(value)


def _check_speedup(
    loader_speedup, n: int, ms: float, batch_size: int, workers: int, floor: float
) -> None:
    seen = loader_speedup.probe(_probe_loader_speedup, n, ms, batch_size, workers)
    mine = _require_ratio(
        seen["record"],
        "loader_speedup",
        "return (samples per second with `workers` workers) / (samples per second with 0)",
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        ref = reference(ASSIGNMENT).loader_speedup(SleepyDataset(n, ms), batch_size, workers)
    pids, caller = seen["pids"], seen["pid"]
    served_by = {p for p in pids if p != caller}
    require(
        # one pass with `workers` workers starts `workers` processes (k passes: k * workers)
        caller in pids and served_by and len(served_by) % workers == 0,
        f"processes that loaded the items in loader_speedup(dataset, {batch_size}, {workers})",
        yours=f"the calling process: {caller in pids}; worker processes: {len(served_by)}",
        expected=f"the calling process (the 0-worker pass) and {workers} worker processes per pass",
        cause="time two full passes: DataLoader(dataset, batch_size, num_workers=0) and "
        "DataLoader(dataset, batch_size, num_workers=workers)",
    )
    sizes = seen["sizes"]
    allowed = {batch_size, n % batch_size} - {0}
    require(
        bool(sizes) and set(sizes) <= allowed,
        f"batch sizes the loaders of loader_speedup(dataset, {batch_size}, {workers}) asked for",
        yours=sorted(set(sizes)),
        expected=sorted(allowed),
        cause="build both loaders with the batch size given: "
        "DataLoader(dataset, batch_size=batch_size, num_workers=...)",
    )
    # On a busy machine the workers start slowly and even the reference falls short of `floor`.
    floor = min(floor, 0.75 * ref)
    require(
        mine >= floor and 0.6 * ref <= mine <= 1.7 * ref,
        f"loader_speedup on an I/O-bound dataset ({n} items of {ms:g} ms, batch {batch_size}, "
        f"{workers} workers), vs the reference measured just now",
        yours=f"{mine:.2f}",
        expected=f"about {ref:.2f} (at least {floor:.2f})",
        cause=(
            "return the 0-worker time over the `workers` time (throughput with workers over "
            "throughput without), not its inverse; and time complete passes: the first batch "
            "alone is mostly the workers' start-up"
            if mine < 1
            else "time complete passes over the loader (every batch), with the same batch size"
        ),
    )


def check_loader_speedup(loader_speedup) -> None:
    """4 workers on a dataset whose items each wait 15 ms: at least 2.5x (the reference measures
    about 3.5x on a 2-core machine; on a busy machine 0.75x the reference), within 0.6x-1.7x of
    the reference measured in the same run (here, in the grading process), with the work really
    spread over 4 worker processes.

    Raises:
        CheckFailed: wrong type, too small or far from the reference, or not 4 workers.
    """
    loader_speedup = student(loader_speedup, "loader_speedup")
    _check_speedup(loader_speedup, n=256, ms=15, batch_size=8, workers=4, floor=2.5)
    passed("loader_speedup measures the gain of 4 workers on an I/O-bound dataset")


def check_loader_speedup_hidden(loader_speedup) -> None:
    """2 workers, another batch size."""
    loader_speedup = student(loader_speedup, "loader_speedup")
    _check_speedup(loader_speedup, n=160, ms=10, batch_size=4, workers=2, floor=1.4)
    passed("loader_speedup agrees with the reference for 2 workers")
