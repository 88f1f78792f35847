"""02_async: checks accept the reference and alternatives, reject every listed mistake;
the reference's cost model agrees with an event-by-event simulation of the queue."""

import inspect
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from grader.checks import ch02_async as checks
from grader.checks.common import CheckFailed

from .helpers import (
    answer_fn,
    assert_sample_scores_as_declared,
    reference_fn,
    run_every_check,
    sample_params,
)

A = "02_async"


@pytest.mark.parametrize(
    "name, signature",
    [
        ("time_gpu", "(fn, *args, warmup: int = 3, repeat: int = 10) -> float"),
        ("mean_loss_without_sync", "(model, batches, loss_fn) -> torch.Tensor"),
        ("pipeline_time", "(t1: float, t2: float, t3: float, n: int) -> tuple[float, float]"),
    ],
)
def test_reference_has_the_curriculum_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


def test_sync_points_answer_key_covers_every_snippet():
    key = reference_fn(A, "SYNC_POINTS")
    assert set(key) == set(checks.SYNC_SNIPPETS)
    assert all(isinstance(v, bool) for v in key.values())
    assert 0 < sum(key.values()) < len(key)


def test_cpu_recorder_agrees_with_the_answer_key():
    """The SyncRecorder sees, on the CPU, the same synchronizing calls the key lists."""
    assert checks.recorded_sync_points() == reference_fn(A, "SYNC_POINTS")


@pytest.mark.parametrize("name", ["time_gpu", "mean_loss_without_sync", "pipeline_time"])
def test_reference_passes_every_check(name, capsys):
    run_every_check(checks, name, reference_fn(A, name))
    assert "OK:" in capsys.readouterr().out


def test_reference_sync_points_pass_every_check():
    run_every_check(checks, "sync_points", reference_fn(A, "SYNC_POINTS"))


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


def _simulate_queue(t1, t2, t3, n):
    """Event-by-event: op i is launched when the frontend is free, runs when the GPU is free."""
    frontend_free = gpu_free = 0.0
    for _ in range(n):
        launched = frontend_free + t1
        frontend_free = launched
        gpu_free = max(gpu_free, launched) + t2
    asynchronous = gpu_free + t3
    synchronous = 0.0
    for _ in range(n):
        synchronous += t1 + t2 + t3
    return synchronous, asynchronous


@given(
    t1=st.floats(0, 50),
    t2=st.floats(0, 50),
    t3=st.floats(0, 50),
    n=st.integers(1, 200),
)
def test_pipeline_time_matches_a_queue_simulation(t1, t2, t3, n):
    got = reference_fn(A, "pipeline_time")(t1, t2, t3, n)
    want = _simulate_queue(t1, t2, t3, n)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_pipeline_time_rejects_no_operations():
    with pytest.raises(ValueError):
        reference_fn(A, "pipeline_time")(1.0, 1.0, 1.0, 0)


def test_time_gpu_check_reports_seconds_as_a_units_mistake():
    def seconds(fn, *args, warmup=3, repeat=10):
        for _ in range(warmup):
            fn(*args)
        t0 = time.perf_counter()
        fn(*args)
        return time.perf_counter() - t0

    with pytest.raises(CheckFailed):
        checks.check_time_gpu(seconds)


def test_mean_loss_check_names_the_synchronizing_call():
    def item_each_batch(model, batches, loss_fn):
        total = 0.0
        for x, y in batches:
            total += loss_fn(model(x), y).item()
        return torch.tensor(total / len(batches))

    with pytest.raises(CheckFailed, match=r"\.item\(\) x5"):
        checks.check_mean_loss_without_sync(item_each_batch)


def test_sync_points_structure_check_rejects_missing_and_non_bool():
    with pytest.raises(CheckFailed, match="one entry per snippet"):
        checks.check_sync_points({"item": True})
    with pytest.raises(CheckFailed, match="True or False"):
        checks.check_sync_points(dict.fromkeys(checks.SYNC_SNIPPETS, 1))


def test_measured_sync_points_needs_cuda():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; see test_cuda.py")
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        checks.measured_sync_points()


def test_checks_are_judged_in_the_grading_process():
    assert checks.JUDGED_IN_GRADER is True


def test_mean_loss_check_catches_a_copy_to_the_cpu_per_batch():
    def to_cpu_each_batch(model, batches, loss_fn):
        device = next(model.parameters()).device
        with torch.no_grad():
            losses = [loss_fn(model(x), y).to(torch.device("cpu")) for x, y in batches]
        return torch.stack(losses).mean().to(device)

    with pytest.raises(CheckFailed, match=r"\.to\('cpu'\) of a device tensor .* x5"):
        checks.check_mean_loss_without_sync(to_cpu_each_batch)


def test_mean_loss_check_accepts_moves_to_the_model_device():
    """Moving to the model's device (the CPU, in the CPU check) is not a copy to the host."""

    def moves(model, batches, loss_fn):
        device = next(model.parameters()).device
        model.to(device)
        total = torch.zeros((), device=device)
        count = 0
        for x, y in batches:
            total = total + loss_fn(model(x.to(device)), y.to(device=device)).detach().to(total)
            count += 1
        if not count:
            raise ValueError("no batches")
        return (total / count).to(device)

    checks.check_mean_loss_without_sync(moves)


def test_time_gpu_check_says_why_a_benchmark_timer_does_not_fit():
    from torch.utils import benchmark

    def with_timer(fn, *args, warmup=3, repeat=10):
        timer = benchmark.Timer(stmt="fn(*args)", globals={"fn": fn, "args": args})
        return timer.blocked_autorange(min_run_time=0.05).median * 1e3

    with pytest.raises(CheckFailed, match="benchmark.Timer chooses its own number of calls"):
        checks.check_time_gpu(with_timer)


def test_demo_snippets_are_not_the_exercise_snippets():
    assert not set(checks.DEMO_SNIPPETS.values()) & set(checks.SYNC_SNIPPETS.values())
    assert not set(checks.DEMO_SNIPPETS) & set(checks.SYNC_SNIPPETS)


def test_no_cell_above_the_exercise_runs_its_snippets_through_a_tool():
    """SYNC_POINTS is for the student to derive: the notebook shows the tools on other snippets."""
    from grader.runtime import course

    nb = course.read(course.source_path(A))
    for cell in nb.cells:
        if course.nbgrader_meta(cell):
            continue
        assert "sync_report(SYNC_SNIPPETS" not in cell.source
        assert "recorded_sync_points(" not in cell.source
        assert "measured_sync_points(" not in cell.source


def test_sync_report_prints_each_snippet(capsys):
    result = checks.sync_report(checks.DEMO_SNIPPETS)
    out = capsys.readouterr().out
    assert set(result) == set(checks.DEMO_SNIPPETS)
    assert all(name in out for name in checks.DEMO_SNIPPETS)
    if not torch.cuda.is_available():
        assert result["float"] and not result["argmax"]


def test_pipeline_exercise_states_the_model():
    """The exercise's markdown gives both totals and both regimes, so the model can be derived."""
    from grader.runtime import course

    nb = course.read(course.source_path(A))
    text = next(c.source for c in nb.cells if c.get("id") == "md-17")
    for formula in ("n·(t1 + t2 + t3)", "t1 + n·t2 + t3", "n·t1 + t2 + t3", "t2 ≥ t1", "t1 > t2"):
        assert formula in text, formula


def test_probes_are_module_level_functions_of_the_grader():
    from grader.runtime import remote

    probes = [getattr(checks, n) for n in dir(checks) if n.startswith("_probe_")]
    assert len(probes) >= 5
    for probe in probes:
        remote._require_probe(probe)  # raises TypeError otherwise


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU on a CPU-only machine")
@pytest.mark.parametrize(
    "name, passes",
    [
        ("reference", True),
        ("correct_time_gpu_events_one_sync", True),
        ("wrong_time_gpu_no_sync", False),
    ],
)
def test_time_gpu_cuda_check_logic_on_a_simulated_gpu(name, passes, monkeypatch):
    """The CUDA check's own logic (probe, reference timed on the grading side, ratio), with
    torch.cuda._sleep played as a 20 ms kernel of the simulated GPU."""
    from grader.runtime.simulate import simulated_cuda

    fn = answer_fn(A, name, "time_gpu")
    with simulated_cuda() as sim:
        monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: sim.launch(cycles / 1e6))
        if passes:
            checks.check_time_gpu_cuda(fn)
        else:
            with pytest.raises(CheckFailed, match="synchronize before reading the clock"):
                checks.check_time_gpu_cuda(fn)


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU on a CPU-only machine")
def test_sync_points_cuda_check_compares_with_the_measurement(monkeypatch):
    from grader.runtime.simulate import simulated_cuda

    key = reference_fn(A, "SYNC_POINTS")
    monkeypatch.setattr(checks, "measured_sync_points", lambda: dict(key))
    with simulated_cuda():
        checks.check_sync_points_cuda(key)
        with pytest.raises(CheckFailed, match="set_sync_debug_mode on this GPU for 1 snippet"):
            checks.check_sync_points_cuda({**key, "to_cpu_non_blocking": True})


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU on a CPU-only machine")
def test_time_gpu_cuda_check_when_the_gpu_clock_rises_from_idle(monkeypatch):
    """The sleep kernel spins for clock cycles: while the GPU's clock still rises from idle
    (here: its first seven kernels at 40% of the clock), whoever is timed first measures 2.5x.
    The reference is timed before the student's function too, so that is not the student."""
    from grader.runtime.simulate import simulated_cuda

    calls = []

    def sleep(cycles):
        calls.append(cycles)
        sim.launch(cycles / (0.4e6 if len(calls) <= 7 else 1e6))

    with simulated_cuda() as sim:
        monkeypatch.setattr(torch.cuda, "_sleep", sleep)
        checks.check_time_gpu_cuda(reference_fn(A, "time_gpu"))


def test_synchronize_without_a_device_waits_for_the_current_device_only():
    # 02 says so where it teaches torch.cuda.synchronize(): PyTorch's own signature and docs.
    import inspect

    device = inspect.signature(torch.cuda.synchronize).parameters["device"]
    assert device.default is None
    assert "current device" in " ".join(torch.cuda.synchronize.__doc__.split())


def _demo_namespace(*cell_ids: str) -> dict:
    """Run 02's setup cell and the named demo cells (in order) and return their globals."""
    import matplotlib

    from grader.runtime import course

    matplotlib.use("Agg")
    cells = {c.get("id"): c.source for c in course.read(course.source_path(A)).cells}
    namespace: dict = {}
    for cell_id in ("code-02", *cell_ids):
        exec(compile(cells[cell_id], cell_id, "exec"), namespace)
    return namespace


def test_dependency_demo_runs_add_after_mul_on_one_stream(capsys):
    """02's `z = x * y + 2` cell: the add kernel is launched while mul runs and starts when it ends."""
    ns = _demo_namespace("code-04b")
    kernels = {e["name"]: e for e in ns["events"] if e["pid"] == 0}
    mul, add = kernels["mul (simulated kernel)"], kernels["add (simulated kernel)"]
    launches = [e for e in ns["events"] if e["name"] == "aten::add"]
    assert launches[0]["ts"] < mul["ts"] + mul["dur"]  # enqueued before mul finished
    assert add["ts"] == pytest.approx(mul["ts"] + mul["dur"], abs=0.01)
    assert ns["launched"] < ns["answered"]
    assert "z.sum().item() -> 50331648.0" in capsys.readouterr().out


def test_copy_while_computing_demo_overlaps_each_copy_with_the_next_compute():
    """02's d2l copy-to-CPU demo: serial = n(compute + copy); side stream = n·compute + copy."""
    from grader.runtime import course

    ns = _demo_namespace()
    cells = {c.get("id"): c.source for c in course.read(course.source_path(A)).cells}
    head = cells["code-06c"].split("\nif HAS_CUDA:")[0]  # the functions, not the plot
    exec(compile(head, "code-06c", "exec"), ns)
    n, compute, copy = ns["N_RESULTS"], ns["COMPUTE_MS"], ns["COPY_MS"]
    serial, _ = ns["compute_and_copy_simulated"](False)
    overlapped, spans = ns["compute_and_copy_simulated"](True)
    assert serial == pytest.approx(n * (compute + copy), rel=0.02)
    assert overlapped == pytest.approx(n * compute + copy, rel=0.02)
    assert len({s.lane for s in spans}) == 2  # compute and copies on two streams
    assert hasattr(torch.Tensor, "record_stream")
    assert "non_blocking" in torch.Tensor.copy_.__doc__


def _raw_events(name: str) -> list[dict]:
    """A shipped real trace's complete events, read with json alone (not the course's reader)."""
    import gzip
    import json

    from grader.runtime import course

    with gzip.open(course.TRACES / f"{name}.json.gz", "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def test_real_trace_demo_finds_the_host_waits_the_raw_events_hold(capsys):
    """02's A100 trace cell: which runtime calls waited, inside which operator, for how long."""
    import collections

    ns = _demo_namespace("code-06r")
    out = capsys.readouterr().out
    raw = _raw_events("a100_event_sync")
    waits = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize")
    calls = sorted((e for e in raw if e["name"] in waits), key=lambda e: e["ts"])
    assert [w.name for w in ns["step"].syncs] == [e["name"] for e in calls] == list(waits)
    assert [w.dur for w in ns["step"].syncs] == [e["dur"] for e in calls]
    ops = [e for e in raw if e["cat"] == "cpu_op"]
    inside = [o["name"] for o in ops if o["ts"] <= calls[0]["ts"] <= o["ts"] + o["dur"]]
    assert inside[-1] == "aten::_local_scalar_dense" and "aten::is_nonzero" in inside
    assert not [o for o in ops if o["ts"] <= calls[1]["ts"] <= o["ts"] + o["dur"]]
    assert "operator: aten::_local_scalar_dense" in out
    # the event wait returns just after the kernel before the event (the spin kernel) ends
    spin = next(e for e in raw if e["cat"] == "kernel" and "spin" in e["name"])
    assert 0 <= calls[1]["ts"] + calls[1]["dur"] - (spin["ts"] + spin["dur"]) < 10

    bench = _raw_events("a100_simple_add")
    bench_calls = [e for e in bench if e["name"] in waits]
    assert collections.Counter(e["name"] for e in bench_calls) == {
        "cudaStreamSynchronize": 16,
        "cudaDeviceSynchronize": 5,
    }
    assert ns["waited_us"] == sum(e["dur"] for e in bench_calls)
    assert f"{len(bench_calls)} host waits, {ns['waited_us']:.0f} µs" in out
    assert ns["per_call"] == {
        ("cudaStreamSynchronize", "aten::copy_"): 16,
        ("cudaDeviceSynchronize", "(none: a direct CUDA call)"): 5,
    }
    copies = {e["name"] for e in bench if e["cat"] == "gpu_memcpy"}
    assert copies == {"Memcpy HtoD (Pageable -> Device)"}
    assert "Perfetto" in out and "a100_event_sync.json.gz" in out
