"""Checks for 02_async: time_gpu, mean_loss_without_sync, pipeline_time, SYNC_POINTS.

Timing checks compare ratios or generous bands measured in the same run, never
absolute thresholds of a particular machine.
"""

from __future__ import annotations

import contextlib
import io
import math
import time

import torch
from torch import nn

from .common import (
    call_student,
    cuda_or_not_checked,
    fail,
    passed,
    require,
)
from .course import reference
from .simulate import SyncRecorder, simulated_cuda

ASSIGNMENT = "02_async"

#: The snippets of the SYNC_POINTS exercise. Each runs with ``x``, a float tensor of
#: 1024 elements on the device under test, already defined.
SYNC_SNIPPETS: dict[str, str] = {
    "matmul": "y = x[:32, None] @ x[None, :32]",
    "sum": "s = x.sum()",
    "item": "v = x.sum().item()",
    "print_tensor": "print(x.sum())",
    "to_cpu": "h = x.cpu()",
    "tolist": "values = x[:4].tolist()",
    "zeros_like": "z = torch.zeros_like(x)",
    "boolean_mask": "positive = x[x > 0]",
    "where": "clipped = torch.where(x > 0, x, torch.zeros_like(x))",
    "if_tensor": "if (x > 0).any():\n    pass",
    "shape": "n = x.shape[0]",
    "nonzero": "idx = torch.nonzero(x > 0)",
    "clone": "c = x.clone()",
    "unique": "u = torch.unique(x.round())",
}


def _run_snippet(code: str, x: torch.Tensor) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, {"torch": torch, "x": x})  # noqa: S102 - the course's fixed snippets


def recorded_sync_points(device: str | torch.device = "cpu") -> dict[str, bool]:
    """Which snippets make synchronizing tensor calls, seen by :class:`SyncRecorder`.

    Works on any device (the CPU included): it records the calls that would make a
    host wait for a GPU.

    Returns:
        Snippet name -> True when the snippet makes at least one such call.
    """
    x = torch.randn(1024, generator=torch.Generator().manual_seed(0)).to(device)
    out = {}
    for name, code in SYNC_SNIPPETS.items():
        with SyncRecorder() as rec:
            _run_snippet(code, x)
        out[name] = bool(rec.calls)
    return out


def measured_sync_points(device: str | torch.device = "cuda") -> dict[str, bool]:
    """Which snippets synchronize, measured with ``torch.cuda.set_sync_debug_mode("error")``.

    Returns:
        Snippet name -> True when CUDA reported a synchronizing operation.

    Raises:
        RuntimeError: CUDA is not available.
    """
    if not torch.cuda.is_available():
        raise RuntimeError(
            "measured_sync_points needs a CUDA GPU; use recorded_sync_points on the CPU"
        )
    x = torch.randn(1024, device=device)
    torch.cuda.synchronize()
    out = {}
    for name, code in SYNC_SNIPPETS.items():
        torch.cuda.set_sync_debug_mode("error")
        try:
            _run_snippet(code, x)
            out[name] = False
        except RuntimeError as exc:
            if "synchroniz" not in str(exc):
                raise
            out[name] = True
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
    return out


# --------------------------------------------------------------------------- time_gpu
class _Counter:
    """A callable that sleeps a scripted number of ms per call and counts calls."""

    def __init__(self, ms_per_call, sim=None):
        self.ms_per_call = ms_per_call
        self.calls = 0
        self.args: list[tuple] = []
        self.sim = sim

    def __call__(self, *args):
        ms = self.ms_per_call(self.calls)
        self.calls += 1
        self.args.append(args)
        if self.sim is not None:
            self.sim.launch(ms)  # asynchronous: returns at once
        else:
            time.sleep(ms / 1000.0)


def _timed(time_gpu, fn, *args, **kwargs) -> float:
    value = call_student(time_gpu, fn, *args, **kwargs)
    require(
        isinstance(value, (int, float)) and not isinstance(value, bool),
        "time_gpu must return a float (milliseconds)",
        yours=f"{value!r} ({type(value).__name__})",
        expected="a float such as 12.5",
        cause="return statistics.median(times) as a Python float; call .item() on a tensor",
    )
    return float(value)


def check_time_gpu(time_gpu) -> None:
    """Check call count, argument passing, units, warm-up, median, and synchronization.

    The last part runs on a simulated asynchronous GPU (:func:`~grader.simulate.simulated_cuda`)
    whose kernels return at once and finish later, so a timer that does not wait for
    the device measures ~0 ms, as it would on a real GPU.

    Raises:
        CheckFailed: on the first behaviour that differs from the exercise.
    """
    counter = _Counter(lambda i: 1)
    _timed(time_gpu, counter, "a", 2, warmup=2, repeat=5)
    require(
        counter.calls == 7,
        "time_gpu(fn, warmup=2, repeat=5) must call fn exactly 7 times",
        yours=f"{counter.calls} calls",
        expected="7 calls (2 warm-up + 5 timed)",
        cause="run `warmup` untimed calls first, then `repeat` timed calls, and nothing else",
    )
    require(
        all(a == ("a", 2) for a in counter.args),
        "time_gpu must call fn(*args)",
        yours=counter.args[:2],
        expected=[("a", 2)] * 2,
        cause="pass the extra positional arguments on: fn(*args)",
    )

    counter = _Counter(lambda i: 20)
    ms = _timed(time_gpu, counter, warmup=1, repeat=3)
    require(
        10 <= ms <= 80,
        "time_gpu of a function that takes 20 ms",
        yours=ms,
        expected="about 20 (milliseconds)",
        cause="return milliseconds: (end - start) * 1000 for perf_counter seconds"
        if ms < 1
        else "time only the fn call",
    )

    counter = _Counter(lambda i: 300 if i == 0 else 10)
    ms = _timed(time_gpu, counter, warmup=1, repeat=1)
    require(
        ms < 150,
        "a slow first call (300 ms, like CUDA's one-time start-up) must not be timed",
        yours=ms,
        expected="about 10 ms",
        cause="run the warm-up calls before starting any timer",
    )

    counter = _Counter(lambda i: 400 if i == 2 else 10)
    ms = _timed(time_gpu, counter, warmup=0, repeat=5)
    require(
        ms < 50,
        "one slow outlier (400 ms) among five 10 ms calls must not move the result",
        yours=ms,
        expected="about 10 ms (the median)",
        cause="return the median (statistics.median), not the mean",
    )

    if torch.cuda.is_available():  # check_time_gpu_cuda times real kernels
        passed("time_gpu counts calls, warms up and returns the median in ms")
        return
    with simulated_cuda(device_count=1) as sim:
        counter = _Counter(lambda i: 30, sim=sim)
        ms = _timed(time_gpu, counter, warmup=1, repeat=3)
        sim.synchronize()
    require(
        20 <= ms <= 100,
        "time_gpu of a (simulated) GPU kernel that runs 30 ms after an instant launch",
        yours=ms,
        expected="about 30 ms",
        cause="kernels launch asynchronously: call torch.cuda.synchronize() (or record CUDA events and "
        "synchronize on the end event) before stopping the timer"
        if ms < 20
        else "time each call separately",
    )
    passed("time_gpu counts calls, warms up, returns the median in ms and waits for the GPU")


def check_time_gpu_cuda(time_gpu) -> None:
    """On a real GPU: compare with the reference on a ~20 ms kernel, as a ratio.

    Raises:
        CheckFailed: the ratio to the reference falls outside [0.6, 1.6].
        NotCheckedWithoutCuda: in grading mode without a GPU.
    """
    if not cuda_or_not_checked("time_gpu on a real GPU kernel"):
        return
    ref = reference(ASSIGNMENT).time_gpu
    sleep = torch.cuda._sleep
    cycles = 20_000_000  # ~10-20 ms at 1-2 GHz; only the ratio to the reference matters
    calls = []

    def kernel(n):
        calls.append(n)
        sleep(n)

    mine = _timed(time_gpu, kernel, cycles, warmup=2, repeat=5)
    require(
        len(calls) == 7,
        "fn must be called warmup + repeat times",
        yours=len(calls),
        expected=7,
        cause="no extra calls",
    )
    theirs = ref(kernel, cycles, warmup=2, repeat=5)
    ratio = mine / theirs
    # Reference figure: ratio 0.98-1.02 for the reference against itself on an H100.
    require(
        0.6 <= ratio <= 1.6,
        "time_gpu / reference on the same GPU kernel",
        yours=f"{mine:.3f} ms (ratio {ratio:.2f})",
        expected=f"{theirs:.3f} ms (ratio about 1)",
        cause="synchronize before reading the clock (torch.cuda.synchronize() or end_event.synchronize())"
        if ratio < 0.6
        else "time only fn(*args), once per timed call",
    )
    passed(f"time_gpu measures a GPU kernel like the reference ({mine:.2f} vs {theirs:.2f} ms)")


# --------------------------------------------------------------------------- mean_loss_without_sync
def _loss_setup(device="cpu", classes=False):
    g = torch.Generator().manual_seed(3)
    torch.manual_seed(3)
    if classes:
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        batches = [
            (torch.randn(10, 8, generator=g), torch.randint(0, 4, (10,), generator=g))
            for _ in range(6)
        ]
        loss_fn = nn.CrossEntropyLoss()
    else:
        model = nn.Linear(8, 1)
        batches = [
            (torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)) for _ in range(5)
        ]
        loss_fn = nn.MSELoss()
    model = model.to(device)
    batches = [(x.to(device), y.to(device)) for x, y in batches]
    return model, batches, loss_fn


def _require_mean_loss(value, expected: torch.Tensor, device: torch.device) -> None:
    require(
        isinstance(value, torch.Tensor),
        "mean_loss_without_sync must return a tensor",
        yours=f"{value!r} ({type(value).__name__})",
        expected="a 0-d tensor such as tensor(0.8123)",
        cause="keep the sum as a tensor; converting to a Python float (.item(), float()) waits for the GPU",
    )
    require(
        value.dim() == 0,
        "the mean loss must be a 0-d tensor",
        yours=tuple(value.shape),
        expected=(),
        cause="sum the per-batch 0-d losses and divide by the number of batches",
    )
    require(
        value.device == device,
        "the mean loss must stay on the model's device",
        yours=str(value.device),
        expected=str(device),
        cause="accumulate on the device of the model's parameters; moving to the CPU synchronizes",
    )
    require(
        torch.allclose(
            value.detach().float().cpu(), expected.detach().float().cpu(), rtol=1e-5, atol=1e-6
        ),
        "mean loss value",
        yours=float(value.detach().cpu()),
        expected=float(expected.detach().cpu()),
        cause="average the per-batch losses: sum(loss_fn(model(x), y)) / number_of_batches",
    )


def check_mean_loss_without_sync(mean_loss_without_sync) -> None:
    """Check the value and type, and that no synchronizing tensor call is made.

    Synchronizing calls are recorded with :class:`~grader.simulate.SyncRecorder`, so
    an ``.item()`` per batch is caught on the CPU too.

    Raises:
        CheckFailed: wrong value/type/device, or a synchronizing call inside.
    """
    model, batches, loss_fn = _loss_setup()
    with torch.no_grad():
        expected = torch.stack([loss_fn(model(x), y) for x, y in batches]).mean()
    with SyncRecorder() as rec, contextlib.redirect_stdout(io.StringIO()) as printed:
        value = call_student(mean_loss_without_sync, model, batches, loss_fn)
    if printed.getvalue():
        print(printed.getvalue(), end="")
    _require_mean_loss(value, expected, torch.device("cpu"))
    require(
        not rec.calls,
        "mean_loss_without_sync made calls that, on a GPU, make the CPU wait for the GPU",
        yours=rec.summary(),
        expected="none: keep everything on the device until the caller asks for the number",
        cause="no .item()/float()/print(loss) per batch: add the 0-d loss tensors (detached) and divide once",
    )
    passed("mean_loss_without_sync returns the right 0-d tensor without synchronizing calls")


def check_mean_loss_without_sync_hidden(mean_loss_without_sync) -> None:
    """Compare with the reference on a classifier, on the default device."""
    device = torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")
    model, batches, loss_fn = _loss_setup(device, classes=True)
    expected = reference(ASSIGNMENT).mean_loss_without_sync(model, batches, loss_fn)
    _require_mean_loss(
        call_student(mean_loss_without_sync, model, batches, loss_fn), expected, device
    )
    passed("mean_loss_without_sync agrees with the reference")


def check_mean_loss_without_sync_cuda(mean_loss_without_sync) -> None:
    """On a real GPU, under ``torch.cuda.set_sync_debug_mode("error")``."""
    if not cuda_or_not_checked("mean_loss_without_sync under CUDA sync debug mode"):
        return
    device = torch.device("cuda:0")
    model, batches, loss_fn = _loss_setup(device)
    with torch.no_grad():
        expected = torch.stack([loss_fn(model(x), y) for x, y in batches]).mean()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        value = mean_loss_without_sync(model, batches, loss_fn)
    except RuntimeError as exc:
        if "synchroniz" in str(exc):
            fail(
                "mean_loss_without_sync synchronized with the GPU",
                yours=str(exc).splitlines()[0],
                expected="no synchronization",
                cause="a .item(), float(), print or .cpu() inside the loop",
            )
        raise
    finally:
        torch.cuda.set_sync_debug_mode("default")
    _require_mean_loss(value, expected, device)
    passed("mean_loss_without_sync runs on the GPU without a single synchronization")


# --------------------------------------------------------------------------- pipeline_time
_ASYNC_CAUSE = (
    "the seed's t1 + n*t2 + t3 holds only when the backend is the slower side; "
    "in general the slower of frontend and backend sets the pace: t1 + (n-1)*max(t1, t2) + t2 + t3"
)


def _require_pipeline_result(got, expected: tuple[float, float], call: str, why: str = "") -> None:
    require(
        isinstance(got, tuple) and len(got) == 2,
        f"{call} must return a (synchronous, asynchronous) tuple",
        yours=got,
        expected=expected,
        cause="return two numbers as a tuple",
    )
    require(
        math.isclose(got[0], expected[0], rel_tol=1e-9, abs_tol=1e-9),
        f"synchronous total for {call}",
        yours=got[0],
        expected=expected[0],
        cause="every operation waits for the previous one: n * (t1 + t2 + t3)",
    )
    require(
        math.isclose(got[1], expected[1], rel_tol=1e-9, abs_tol=1e-9),
        f"asynchronous total for {call}" + (f" ({why})" if why else ""),
        yours=got[1],
        expected=expected[1],
        cause=_ASYNC_CAUSE,
    )


def check_pipeline_time(pipeline_time) -> None:
    """Check both totals, including the launch-bound case t1 > t2.

    Raises:
        CheckFailed: a total is wrong or the return value is not a 2-tuple of floats.
    """
    cases = [
        ((1.0, 2.0, 1.0, 10), (40.0, 22.0), "backend-bound: t1 + n*t2 + t3"),
        ((2.0, 2.0, 0.5, 1), (4.5, 4.5), "one operation: nothing to overlap"),
        (
            (3.0, 1.0, 1.0, 10),
            (50.0, 32.0),
            "launch-bound (t1 > t2): the frontend is the bottleneck, n*t1 + t2 + t3",
        ),
        ((0.01, 5.0, 0.2, 100), (521.0, 500.21), "backend-bound with a fast frontend"),
    ]
    for args, expected, why in cases:
        _require_pipeline_result(
            call_student(pipeline_time, *args), expected, f"pipeline_time{args}", why
        )
    passed("pipeline_time gives both totals, backend-bound and launch-bound")


def check_pipeline_time_hidden(pipeline_time) -> None:
    """Compare with the reference on a grid of cases."""
    ref = reference(ASSIGNMENT).pipeline_time
    for t1 in (0.5, 1.0, 4.0):
        for t2 in (0.25, 1.0, 3.0):
            for t3 in (0.0, 0.7):
                for n in (1, 2, 7, 1000):
                    got = call_student(pipeline_time, t1, t2, t3, n)
                    _require_pipeline_result(
                        got, ref(t1, t2, t3, n), f"pipeline_time({t1}, {t2}, {t3}, {n})"
                    )
    passed("pipeline_time agrees with the reference")


# --------------------------------------------------------------------------- SYNC_POINTS
def check_sync_points(sync_points) -> None:
    """Check SYNC_POINTS is a dict with one bool for each snippet of SYNC_SNIPPETS."""
    require(
        isinstance(sync_points, dict),
        "SYNC_POINTS must be a dict",
        yours=type(sync_points).__name__,
        expected="dict",
        cause="map each snippet name to True or False",
    )
    require(
        set(sync_points) == set(SYNC_SNIPPETS),
        "SYNC_POINTS must have one entry per snippet",
        yours=sorted(sync_points),
        expected=sorted(SYNC_SNIPPETS),
        cause="use exactly the snippet names shown in the notebook",
    )
    bad = {k: v for k, v in sync_points.items() if not isinstance(v, bool)}
    require(
        not bad,
        "every SYNC_POINTS value must be True or False",
        yours=bad,
        expected="bools",
        cause="True when the snippet makes the host wait for the GPU",
    )
    passed("SYNC_POINTS has a True/False answer for every snippet")


def _compare_sync_points(sync_points, truth: dict[str, bool], source: str) -> None:
    wrong = sorted(k for k in SYNC_SNIPPETS if sync_points.get(k) != truth[k])
    require(
        not wrong,
        f"SYNC_POINTS disagrees with {source} for {len(wrong)} snippet(s)",
        yours={k: sync_points.get(k) for k in wrong},
        expected={k: truth[k] for k in wrong},
        cause="a call synchronizes when the host needs a value or a size that only the GPU knows",
    )


def check_sync_points_hidden(sync_points) -> None:
    """Compare with the reference answers."""
    check_sync_points(sync_points)
    _compare_sync_points(sync_points, reference(ASSIGNMENT).SYNC_POINTS, "the reference")
    passed("SYNC_POINTS agrees with the reference")


def check_sync_points_cuda(sync_points) -> None:
    """Compare with what CUDA's sync debug mode reports on this GPU."""
    if not cuda_or_not_checked("SYNC_POINTS against torch.cuda.set_sync_debug_mode on a real GPU"):
        return
    check_sync_points(sync_points)
    _compare_sync_points(
        sync_points, measured_sync_points(), "torch.cuda.set_sync_debug_mode on this GPU"
    )
    passed("SYNC_POINTS matches what this GPU reports")
