"""Checks for 02_async: time_gpu, mean_loss_without_sync, pipeline_time, SYNC_POINTS.

Each ``check_*`` reaches the student's code through a :class:`~grader.runtime.remote.Handle`
(:mod:`grader.runtime.remote`): calls and the ``_probe_*`` functions below run where the student's code
lives (under autograde, in their kernel) and hand back plain data (timings, values, the calls a
recorder saw); every comparison, every expected value and every call of the reference solution
is made here, in the check. Timing checks compare ratios or generous bands measured in the same
run, never absolute thresholds of a particular machine.
"""

from __future__ import annotations

import contextlib
import io
import math
import time

import torch
from torch import nn

from grader.checks.common import (
    call_student,
    cuda_or_not_checked,
    expect_raises,
    fail,
    passed,
    require,
)
from grader.runtime.course import reference
from grader.runtime.handover import exception_name
from grader.runtime.remote import Recorded, attempt, attempt_all, outcome, student
from grader.runtime.simulate import DEVICE_TO_HOST, SyncRecorder, simulated_cuda, summarize

ASSIGNMENT = "02_async"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True

#: The snippets of the SYNC_POINTS exercise. Each runs with ``x``, a float tensor of
#: 1024 elements on the device under test, already defined.
SYNC_SNIPPETS: dict[str, str] = {
    "matmul": "y = x[:32, None] @ x[None, :32]",
    "max": "m = x.max()",
    "format": 's = f"{x.mean():.3f}"',
    "int_count": "k = int((x > 0).sum())",
    "any": "flag = (x > 0).any()",
    "if_tensor": "if (x > 0).any():\n    pass",
    "masked_fill": "y = x.masked_fill(x < 0, 0.0)",
    "boolean_mask": "positive = x[x > 0]",
    "where": "clipped = torch.where(x > 0, x, torch.zeros_like(x))",
    "where_one_arg": "idx = torch.where(x > 0)",
    "to_cpu": 'h = x.to("cpu")',
    "to_cpu_non_blocking": 'h = x.to("cpu", non_blocking=True)',
    "shape": "n = x.shape[0]",
    "unique": "u = torch.unique(x.round())",
}

#: Other snippets, for the notebook's demo of the tools (not the exercise's).
DEMO_SNIPPETS: dict[str, str] = {
    "float": "v = float(x.sum())",
    "numpy": "a = x.cpu().numpy()",
    "argmax": "i = x.argmax()",
    "relu": "r = torch.relu(x)",
    "masked_select": "s = torch.masked_select(x, x > 0)",
    "nonzero": "idx = x.nonzero()",
    "print_shape": "print(x.shape)",
}


def _run_snippet(code: str, x: torch.Tensor) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, {"torch": torch, "x": x})  # noqa: S102 - the course's fixed snippets


def recorded_sync_points(snippets: dict[str, str] | None = None) -> dict[str, bool]:
    """Which snippets make synchronizing tensor calls, seen by :class:`SyncRecorder`.

    Works on any machine: each snippet runs twice under the recorder, with ``x`` on the CPU
    (standing for the GPU) and on the ``meta`` device (where a copy to the CPU is a real
    device change; errors there are expected: a meta tensor has no values).

    Args:
        snippets: Name -> code (default: :data:`SYNC_SNIPPETS`).

    Returns:
        Snippet name -> True when the snippet makes at least one synchronizing call.
    """
    snippets = SYNC_SNIPPETS if snippets is None else snippets
    x = torch.randn(1024, generator=torch.Generator().manual_seed(0))
    out = {}
    for name, code in snippets.items():
        with SyncRecorder() as rec:
            _run_snippet(code, x)
        with SyncRecorder() as on_meta, contextlib.suppress(Exception):
            _run_snippet(code, x.to("meta"))
        out[name] = bool(rec.calls or on_meta.calls)
    return out


def measured_sync_points(
    snippets: dict[str, str] | None = None, device: str | torch.device = "cuda"
) -> dict[str, bool]:
    """Which snippets synchronize, measured with ``torch.cuda.set_sync_debug_mode("error")``.

    Args:
        snippets: Name -> code (default: :data:`SYNC_SNIPPETS`).
        device: The CUDA device ``x`` lives on.

    Returns:
        Snippet name -> True when CUDA reported a synchronizing operation.

    Raises:
        RuntimeError: CUDA is not available.
    """
    if not torch.cuda.is_available():
        raise RuntimeError(
            "measured_sync_points needs a CUDA GPU; use recorded_sync_points on the CPU"
        )
    snippets = SYNC_SNIPPETS if snippets is None else snippets
    x = torch.randn(1024, device=device)
    torch.cuda.synchronize()
    out = {}
    for name, code in snippets.items():
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


def sync_report(snippets: dict[str, str]) -> dict[str, bool]:
    """Print, for each snippet, whether it makes the host wait for the GPU, and return it.

    On a GPU: measured with ``torch.cuda.set_sync_debug_mode("error")``; without one: recorded
    with :class:`~grader.runtime.simulate.SyncRecorder` (:func:`recorded_sync_points`).
    """
    if torch.cuda.is_available():
        result = measured_sync_points(snippets)
        how = f"measured with set_sync_debug_mode('error') on {torch.cuda.get_device_name(0)}"
    else:
        result = recorded_sync_points(snippets)
        how = "recorded with SyncRecorder (no GPU here)"
    print(how)
    width = max(len(name) for name in snippets)
    for name, code in snippets.items():
        verdict = "WAITS for the GPU" if result[name] else "no wait"
        shown = code.replace("\n", "\\n ")
        print(f"  {name:>{width}}  {verdict:<17}  {shown}")
    return result


# --------------------------------------------------------------------------- time_gpu
#: The calls the CPU check makes: fn sleeps ``ms`` per call (``slow`` overrides some calls by
#: index); ``simulated``: fn launches a kernel of that length on a simulated GPU instead.
_TIME_CASES: dict[str, dict] = {
    "count": {"ms": 1, "slow": {}, "args": ("a", 2), "warmup": 2, "repeat": 5},
    "units": {"ms": 20, "slow": {}, "args": (), "warmup": 1, "repeat": 3},
    "warmup": {"ms": 10, "slow": {0: 300}, "args": (), "warmup": 1, "repeat": 1},
    "median": {"ms": 10, "slow": {2: 400}, "args": (), "warmup": 0, "repeat": 5},
    "sync": {"ms": 30, "slow": {}, "args": ("b",), "warmup": 1, "repeat": 3, "simulated": True},
}


class _Counter:
    """A callable that takes a scripted number of ms per call and counts its calls: it sleeps,
    or (with ``sim``) launches a kernel that long on the simulated GPU and returns at once."""

    def __init__(self, ms: float, slow: dict, sim=None):
        self.ms = ms
        self.slow = slow
        self.calls = 0
        self.args: list[tuple] = []
        self.sim = sim

    def __call__(self, *args):
        ms = self.slow.get(self.calls, self.ms)
        self.calls += 1
        self.args.append(args)
        if self.sim is not None:
            self.sim.launch(ms)  # asynchronous: returns at once
        else:
            time.sleep(ms / 1000.0)


def _probe_time_gpu(time_gpu, cases: dict) -> dict:
    """Probe: time_gpu on each case of :data:`_TIME_CASES` (the simulated one on a simulated
    GPU); for each, the call's outcome, how many times fn was called, and with what."""
    seen = {}
    for name, case in cases.items():
        kwargs = {"warmup": case["warmup"], "repeat": case["repeat"]}
        if case.get("simulated"):
            with simulated_cuda(device_count=1) as sim:
                counter = _Counter(case["ms"], case["slow"], sim)
                record = attempt(time_gpu, counter, *case["args"], **kwargs)
                sim.synchronize()
        else:
            counter = _Counter(case["ms"], case["slow"])
            record = attempt(time_gpu, counter, *case["args"], **kwargs)
        seen[name] = {"record": record, "calls": counter.calls, "args": counter.args}
    return seen


def _call_label(case: dict) -> str:
    shown = ", ".join(["fn", *(repr(a) for a in case["args"])])
    return f"time_gpu({shown}, warmup={case['warmup']}, repeat={case['repeat']})"


def _timed(record: dict, call: str) -> float:
    """The value of a recorded time_gpu call, required to be a number of milliseconds."""
    value = call_student(Recorded("time_gpu", [((), {})], [record]), name=call)
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

    The last part runs (without a GPU) on a simulated asynchronous GPU
    (:func:`~grader.runtime.simulate.simulated_cuda`) whose kernels return at once and finish later,
    so a timer that does not wait for the device measures ~0 ms, as it would on a real GPU.

    Raises:
        CheckFailed: on the first behaviour that differs from the exercise.
    """
    time_gpu = student(time_gpu, "time_gpu")
    on_gpu = torch.cuda.is_available()  # check_time_gpu_cuda times real kernels there
    cases = {k: v for k, v in _TIME_CASES.items() if not (on_gpu and v.get("simulated"))}
    seen = time_gpu.probe(_probe_time_gpu, cases)

    def timed(name: str) -> float:
        return _timed(seen[name]["record"], _call_label(cases[name]))

    timed("count")
    calls, args = seen["count"]["calls"], seen["count"]["args"]
    require(
        calls == 7,
        "time_gpu(fn, warmup=2, repeat=5) must call fn exactly 7 times",
        yours=f"{calls} calls",
        expected="7 calls (2 warm-up + 5 timed)",
        cause="run `warmup` untimed calls first, then `repeat` timed calls, and nothing else "
        "(a helper such as torch.utils.benchmark.Timer chooses its own number of calls)",
    )
    require(
        all(tuple(a) == ("a", 2) for a in args),
        "time_gpu must call fn(*args)",
        yours=args[:2],
        expected=[("a", 2)] * 2,
        cause="pass the extra positional arguments on: fn(*args)",
    )

    ms = timed("units")
    require(
        10 <= ms <= 80,
        "time_gpu of a function that takes 20 ms",
        yours=ms,
        expected="about 20 (milliseconds)",
        cause="return milliseconds: (end - start) * 1000 for perf_counter seconds"
        if ms < 1
        else "return milliseconds: perf_counter_ns() differences are ns, / 1e6 for ms "
        "(/ 1e3 gives microseconds)"
        if ms > 1000
        else "time only the fn call",
    )

    ms = timed("warmup")
    require(
        ms < 100,
        "a slow first call (300 ms, like CUDA's one-time start-up) must not be timed",
        yours=ms,
        expected="about 10 ms",
        cause="run the warm-up calls before starting any timer",
    )

    ms = timed("median")
    require(
        ms < 50,
        "one slow outlier (400 ms) among five 10 ms calls must not move the result",
        yours=ms,
        expected="about 10 ms (the median)",
        cause="time each call separately and return the median (statistics.median), not the mean",
    )

    if on_gpu:
        passed("time_gpu counts calls, warms up and returns the median in ms")
        return
    ms = timed("sync")
    args = seen["sync"]["args"]
    require(
        all(tuple(a) == ("b",) for a in args),
        "time_gpu on a (simulated) GPU must call fn(*args) too",
        yours=args[:2],
        expected=[("b",)] * 2,
        cause="pass the extra positional arguments on in every call, in the CUDA branch as in "
        "the CPU one: fn(*args)",
    )
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


class _SleepKernel:
    """fn for the CUDA check: one ``torch.cuda._sleep`` kernel per call, counted."""

    def __init__(self):
        self.calls = 0

    def __call__(self, cycles: int) -> None:
        self.calls += 1
        torch.cuda._sleep(cycles)


#: Spin cycles of the CUDA check's kernel: ~10-20 ms at 1-2 GHz; only the ratio matters.
SLEEP_CYCLES = 20_000_000


def _probe_time_gpu_cuda(time_gpu, cycles: int, warmup: int, repeat: int) -> dict:
    """Probe: time_gpu on a real sleep kernel; its outcome and the number of calls."""
    kernel = _SleepKernel()
    torch.cuda.synchronize()
    record = attempt(time_gpu, kernel, cycles, warmup=warmup, repeat=repeat)
    torch.cuda.synchronize()
    return {"record": record, "calls": kernel.calls}


def check_time_gpu_cuda(time_gpu) -> None:
    """On a real GPU: compare with the reference on a ~20 ms kernel, as a ratio.

    The student's function is timed in their process, the reference here, on the same GPU in
    the same grading job: once before the student's (which also brings the GPU's clock up
    from idle: the sleep kernel spins for clock cycles, so it lasts longer while the clock
    rises) and once after. The band applies to the shorter and the longer of the two.

    Raises:
        CheckFailed: the ratio to the reference falls outside [0.6, 1.6].
        NotCheckedWithoutCuda: in grading mode without a GPU.
    """
    if not cuda_or_not_checked("time_gpu on a real GPU kernel"):
        return
    time_gpu = student(time_gpu, "time_gpu")
    ref = reference(ASSIGNMENT).time_gpu
    before = ref(_SleepKernel(), SLEEP_CYCLES, warmup=2, repeat=5)
    seen = time_gpu.probe(_probe_time_gpu_cuda, SLEEP_CYCLES, 2, 5)
    mine = _timed(seen["record"], "time_gpu(sleep_kernel, cycles, warmup=2, repeat=5)")
    require(
        seen["calls"] == 7,
        "fn must be called warmup + repeat times",
        yours=seen["calls"],
        expected=7,
        cause="no extra calls",
    )
    theirs = after = ref(_SleepKernel(), SLEEP_CYCLES, warmup=2, repeat=5)
    ratio = mine / theirs
    # Reference figure: ratio 0.98-1.02 for the reference against itself on an H100.
    require(
        0.6 * min(before, after) <= mine <= 1.6 * max(before, after),
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
    """A model, its batches and a loss function. The last batch is short, as a DataLoader's is
    when the dataset does not divide: the mean over batches counts it once, like the others, so a
    mean weighted by samples differs."""
    g = torch.Generator().manual_seed(3)
    torch.manual_seed(3)
    if classes:
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        batches = [
            (torch.randn(n, 8, generator=g), torch.randint(0, 4, (n,), generator=g))
            for n in (10, 10, 10, 10, 10, 3)
        ]
        loss_fn = nn.CrossEntropyLoss()
    else:
        model = nn.Linear(8, 1)
        batches = [
            (torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g))
            for n in (16, 16, 16, 16, 5)
        ]
        loss_fn = nn.MSELoss()
    model = model.to(device)
    batches = [(x.to(device), y.to(device)) for x, y in batches]
    return model, batches, loss_fn


def _expected_mean_loss(device="cpu", classes=False) -> torch.Tensor:
    """The mean loss of :func:`_loss_setup`'s batches, computed here (grading side)."""
    model, batches, loss_fn = _loss_setup(device, classes)
    with torch.no_grad():
        return torch.stack([loss_fn(model(x), y) for x, y in batches]).mean()


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


def _probe_mean_loss(mean_loss_without_sync) -> dict:
    """Probe: the student's function on the CPU under a :class:`SyncRecorder` (its outcome and
    the synchronizing calls), then again on ``meta`` tensors, where a copy to the CPU is a
    device change the recorder sees (its outcome does not matter: meta tensors have no
    values)."""
    model, batches, loss_fn = _loss_setup("cpu")
    with SyncRecorder() as rec:
        record = attempt(mean_loss_without_sync, model, batches, loss_fn)
    stream = attempt(mean_loss_without_sync, model, (batch for batch in batches), loss_fn)
    with contextlib.redirect_stdout(io.StringIO()):
        empty = attempt(mean_loss_without_sync, model, [], loss_fn)
    model, batches, loss_fn = _loss_setup("meta")
    with (
        SyncRecorder() as on_meta,
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.suppress(Exception),
    ):
        mean_loss_without_sync(model, batches, loss_fn)
    moves = [call for call in on_meta.calls if call in DEVICE_TO_HOST]
    return {
        "record": record,
        "calls": list(rec.calls),
        "moves": moves,
        "stream": stream,
        "empty": empty,
    }


def check_mean_loss_without_sync(mean_loss_without_sync) -> None:
    """Check the value and type, and that no synchronizing tensor call is made.

    Synchronizing calls are recorded with :class:`~grader.runtime.simulate.SyncRecorder`, so an
    ``.item()`` per batch is caught on the CPU too; blocking copies to the CPU (``.to("cpu")``,
    ``copy_`` into a CPU tensor) are seen in a second run on ``meta`` tensors, which stand for
    the GPU. Then the same batches come as a generator (``batches`` is any iterable: a
    ``len(batches)`` fails there), and an empty list must raise (``0 / 0`` on a tensor is a
    silent NaN; the exercise asks for ``ValueError``, and another exception loses the check).

    Raises:
        CheckFailed: wrong value/type/device, a synchronizing call inside, a generator of
            batches not accepted, or no batches not refused.
    """
    mean_loss_without_sync = student(mean_loss_without_sync, "mean_loss_without_sync")
    seen = mean_loss_without_sync.probe(_probe_mean_loss)
    value = call_student(
        Recorded("mean_loss_without_sync", [((), {})], [seen["record"]]),
        name="mean_loss_without_sync(model, batches, loss_fn)",
    )
    expected = _expected_mean_loss("cpu")
    _require_mean_loss(value, expected, torch.device("cpu"))
    calls = seen["calls"] + seen["moves"]
    require(
        not calls,
        "mean_loss_without_sync made calls that, on a GPU, make the CPU wait for the GPU",
        yours=summarize(calls),
        expected="none: keep everything on the device until the caller asks for the number",
        cause="no .item()/float()/print(loss)/.cpu()/.to('cpu') per batch: add the 0-d loss "
        "tensors (detached) on the model's device and divide once",
    )
    try:
        streamed = outcome(seen["stream"])
    except Exception as exc:  # noqa: BLE001 - the student's error becomes the message
        fail(
            "mean_loss_without_sync(model, <a generator of batches>, loss_fn) failed",
            yours=f"raised {exception_name(exc)}: {exc}",
            expected=f"{float(expected):.6f}, as for a list of the same batches",
            cause="`batches` is any iterable (a DataLoader, a generator): iterate over it once "
            "and count the batches as you go; len(batches) and batches[i] need a list",
        )
    _require_mean_loss(streamed, expected, torch.device("cpu"))
    expect_raises(
        ValueError,
        Recorded("mean_loss_without_sync", [((), {})], [seen["empty"]]),
        what="mean_loss_without_sync(model, [], loss_fn) must raise ValueError",
        cause="0 / 0 on a tensor gives NaN without an error, and another exception is not what "
        "the statement asks for: count the batches and raise ValueError when there were none",
    )
    passed("mean_loss_without_sync returns the right 0-d tensor without synchronizing calls")


def _probe_mean_loss_on(mean_loss_without_sync, device: str, classes: bool) -> dict:
    """Probe: the student's function on :func:`_loss_setup`'s model and batches."""
    model, batches, loss_fn = _loss_setup(device, classes)
    return attempt(mean_loss_without_sync, model, batches, loss_fn)


def check_mean_loss_without_sync_hidden(mean_loss_without_sync) -> None:
    """Compare with the reference on a classifier, on the default device."""
    mean_loss_without_sync = student(mean_loss_without_sync, "mean_loss_without_sync")
    device = torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")
    record = mean_loss_without_sync.probe(_probe_mean_loss_on, str(device), True)
    model, batches, loss_fn = _loss_setup(device, classes=True)
    expected = reference(ASSIGNMENT).mean_loss_without_sync(model, batches, loss_fn)
    _require_mean_loss(
        call_student(
            Recorded("mean_loss_without_sync", [((), {})], [record]),
            name="mean_loss_without_sync(classifier, batches, cross_entropy)",
        ),
        expected,
        device,
    )
    passed("mean_loss_without_sync agrees with the reference")


def _probe_mean_loss_cuda(mean_loss_without_sync) -> dict:
    """Probe: the student's function on cuda:0 under ``set_sync_debug_mode("error")``."""
    model, batches, loss_fn = _loss_setup("cuda:0")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        record = attempt(mean_loss_without_sync, model, batches, loss_fn)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return record


def check_mean_loss_without_sync_cuda(mean_loss_without_sync) -> None:
    """On a real GPU, under ``torch.cuda.set_sync_debug_mode("error")``."""
    if not cuda_or_not_checked("mean_loss_without_sync under CUDA sync debug mode"):
        return
    mean_loss_without_sync = student(mean_loss_without_sync, "mean_loss_without_sync")
    device = torch.device("cuda:0")
    record = mean_loss_without_sync.probe(_probe_mean_loss_cuda)
    if not record["ok"] and "synchroniz" in str(record["error"].get("message", "")):
        fail(
            "mean_loss_without_sync synchronized with the GPU",
            yours=str(record["error"]["message"]).splitlines()[0],
            expected="no synchronization",
            cause="a .item(), float(), print, .cpu() or .to('cpu') in the function",
        )
    value = call_student(
        Recorded("mean_loss_without_sync", [((), {})], [record]),
        name="mean_loss_without_sync(model, batches, loss_fn) on cuda:0",
    )
    _require_mean_loss(value, _expected_mean_loss(device), device)
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
        all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in got),
        f"{call} must return two numbers",
        yours=got,
        expected=expected,
        cause="return (float(synchronous), float(asynchronous))",
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


def _pipeline_answers(pipeline_time, cases: list) -> Recorded:
    """The student's answers for ``cases`` (argument tuples), all made in one probe."""
    calls = [(args, {}) for args in cases]
    return Recorded("pipeline_time", calls, pipeline_time.probe(attempt_all, calls))


def check_pipeline_time(pipeline_time) -> None:
    """Check both totals, including the launch-bound case t1 > t2, and the ValueError for n < 1.

    Raises:
        CheckFailed: a total is wrong, the return value is not a 2-tuple of numbers, or n < 1
            is accepted.
    """
    pipeline_time = student(pipeline_time, "pipeline_time")
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
    invalid = [(1.0, 1.0, 1.0, 0), (1.0, 2.0, 0.5, -3)]
    answers = _pipeline_answers(pipeline_time, [args for args, _, _ in cases] + invalid)
    for args, expected, why in cases:
        call = f"pipeline_time{args}"
        _require_pipeline_result(call_student(answers, *args, name=call), expected, call, why)
    for args in invalid:
        expect_raises(
            ValueError,
            answers,
            *args,
            what=f"pipeline_time{args} must raise ValueError (n < 1)",
            cause="check n first: if n < 1: raise ValueError(...)",
        )
    passed("pipeline_time gives both totals, backend-bound and launch-bound, and rejects n < 1")


def check_pipeline_time_hidden(pipeline_time) -> None:
    """Compare with the reference on a grid of cases."""
    pipeline_time = student(pipeline_time, "pipeline_time")
    ref = reference(ASSIGNMENT).pipeline_time
    cases = [
        (t1, t2, t3, n)
        for t1 in (0.5, 1.0, 4.0)
        for t2 in (0.25, 1.0, 3.0)
        for t3 in (0.0, 0.7)
        for n in (1, 2, 7, 1000)
    ]
    answers = _pipeline_answers(pipeline_time, cases)
    for args in cases:
        call = f"pipeline_time{args}"
        _require_pipeline_result(call_student(answers, *args, name=call), ref(*args), call)
    passed("pipeline_time agrees with the reference")


# --------------------------------------------------------------------------- SYNC_POINTS
def _answers(sync_points) -> dict:
    """SYNC_POINTS as plain data, and the checks every answer must pass first."""
    handle = student(sync_points, "SYNC_POINTS")
    try:
        answers = handle.value()
    except Exception as exc:  # noqa: BLE001 - undefined, or not plain data
        fail(
            "SYNC_POINTS could not be read",
            yours=f"{exception_name(exc)}: {exc}",
            expected="a dict mapping each snippet name to True or False",
            cause="run the exercise cell that defines SYNC_POINTS; use plain True/False values",
        )
    require(
        isinstance(answers, dict),
        "SYNC_POINTS must be a dict",
        yours=type(answers).__name__,
        expected="dict",
        cause="map each snippet name to True or False",
    )
    require(
        set(answers) == set(SYNC_SNIPPETS),
        "SYNC_POINTS must have one entry per snippet",
        yours=sorted(map(str, answers)),
        expected=sorted(SYNC_SNIPPETS),
        cause="use exactly the snippet names shown in the notebook",
    )
    bad = {k: v for k, v in answers.items() if not isinstance(v, bool)}
    require(
        not bad,
        "every SYNC_POINTS value must be True or False",
        yours=bad,
        expected="bools",
        cause="True when the snippet makes the host wait for the GPU",
    )
    return answers


def check_sync_points(sync_points) -> None:
    """Check SYNC_POINTS is a dict with one bool for each snippet of SYNC_SNIPPETS."""
    _answers(sync_points)
    passed("SYNC_POINTS has a True/False answer for every snippet")


def _compare_sync_points(answers: dict, truth: dict[str, bool], source: str) -> None:
    wrong = sorted(k for k in SYNC_SNIPPETS if answers.get(k) != truth[k])
    require(
        not wrong,
        f"SYNC_POINTS disagrees with {source} for {len(wrong)} snippet(s)",
        yours={k: answers.get(k) for k in wrong},
        expected={k: truth[k] for k in wrong},
        cause="a call synchronizes when the host needs a value or a size that only the GPU "
        "knows, or copies to pageable host memory; a non-blocking copy to the CPU does not wait",
    )


def check_sync_points_hidden(sync_points) -> None:
    """Compare with the reference answers."""
    answers = _answers(sync_points)
    _compare_sync_points(answers, reference(ASSIGNMENT).SYNC_POINTS, "the reference")
    passed("SYNC_POINTS agrees with the reference")


def check_sync_points_cuda(sync_points) -> None:
    """Compare with what CUDA's sync debug mode reports on this GPU (measured here, in the
    grading process, where the student's code cannot reach)."""
    if not cuda_or_not_checked("SYNC_POINTS against torch.cuda.set_sync_debug_mode on a real GPU"):
        return
    answers = _answers(sync_points)
    _compare_sync_points(
        answers, measured_sync_points(), "torch.cuda.set_sync_debug_mode on this GPU"
    )
    passed("SYNC_POINTS matches what this GPU reports")
