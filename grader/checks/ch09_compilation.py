"""Checks for 09_compilation: branch_free, export_model, compile_speedup.

``branch_free`` is judged by ``torch._dynamo.explain`` (one graph, no graph break) and by its
outputs; ``export_model`` by loading the saved program in a **fresh Python process** that has
no access to the model's class; ``compile_speedup`` against the reference measured in the
same run, on a launch-bound function where compilation pays on any machine.

The checks reach the student's code through :mod:`grader.runtime.remote`: ``explain`` of the student's
function, the export and the fresh process that loads the file, and the timing of the student's
``compile_speedup`` run in the student's process (the ``_probe_*`` functions) and hand back
plain data (graph counts, output tensors, the measured ratio). The functions compared with
(``normalize_scores``, the model in eval mode) and the reference's timing run here.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import re
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from grader.checks.common import (
    CheckFailed,
    call_student,
    cuda_or_not_checked,
    fail,
    passed,
    require,
)
from grader.runtime import handover
from grader.runtime.course import reference
from grader.runtime.quiet import captured_stderr
from grader.runtime.remote import Recorded, attempt, kernel_side, student

ASSIGNMENT = "09_compilation"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True


# --------------------------------------------------------------------------- branch_free
def normalize_scores(x: torch.Tensor) -> torch.Tensor:
    """Scale ``x`` into [-1, 1] when its largest magnitude exceeds 1, then squash and center.

    The notebook's data-dependent function: ``.item()`` copies a value to the host and the
    ``if`` branches on it, so ``torch.compile`` cannot capture it as one graph.

    Args:
        x: Floating-point tensor of any shape.

    Returns:
        ``tanh(x') * 2 - mean(x')`` where ``x' = x / max|x|`` if ``max|x| > 1``, else ``x``;
        same shape and dtype as ``x``.
    """
    peak = x.abs().max()
    if peak.item() > 1.0:  # a value on the host decides which code runs: a graph break
        x = x / peak
    return torch.tanh(x) * 2 - x.mean()


@contextlib.contextmanager
def quiet_compiler() -> Iterator[None]:
    """Silence the compiler's diagnostics: dynamo's graph-break warnings (``explain`` reports the
    breaks itself), the partial graphs ``torch.export`` prints to stderr when it fails, and what
    the first compilation logs ("No CUDA runtime is found"), at the file-descriptor level too
    (:func:`grader.runtime.quiet.captured_stderr`)."""
    logger = logging.getLogger("torch._dynamo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with captured_stderr(show_on_error=False):  # the exception says what failed
            yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _importable_globals(fn: Callable) -> Iterator[None]:
    """Let dynamo import the module ``fn``'s globals name, whatever that name is.

    Dynamo (torch 2.11) reads a global of an inlined function through
    ``importlib.import_module(fn.__globals__["__name__"])``; a function defined in a namespace
    that is not a module in ``sys.modules`` (code run with ``exec``) would fail there with
    ModuleNotFoundError. Inside the block such a name is registered as a module holding the same
    values; nothing is registered for a name that is already a module (``__main__`` in a
    notebook)."""
    namespace = getattr(fn, "__globals__", None)
    name = namespace.get("__name__") if isinstance(namespace, dict) else None
    if not isinstance(name, str) or name in sys.modules:
        yield
        return
    module = types.ModuleType(name)
    module.__dict__.update(namespace)
    sys.modules[name] = module
    try:
        yield
    finally:
        if sys.modules.get(name) is module:
            del sys.modules[name]


def explain(fn: Callable, *args):
    """``torch._dynamo.explain(fn)(*args)`` from a clean dynamo cache, without log noise.

    Returns:
        The ``ExplainOutput``: ``graph_count``, ``graph_break_count``, ``break_reasons``, ...
    """
    torch._dynamo.reset()
    with quiet_compiler(), _importable_globals(fn):
        return torch._dynamo.explain(fn)(*args)


def _reasons(explanation) -> list[str]:
    return [str(r.reason).strip().splitlines()[0][:120] for r in explanation.break_reasons]


def _branch_inputs(hidden: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3 if hidden else 0)
    xs = [
        torch.randn(64, generator=g) * 3,  # largest magnitude above 1: scaled
        torch.randn(64, generator=g) * 0.2,  # below 1: not scaled
        torch.zeros(8),  # 0: never divide
        torch.linspace(-1.5, 1.25, 12),  # 1.5: scaled (a threshold above 1 misses it)
    ]
    if hidden:
        xs += [
            torch.randn(16, 8, generator=g, dtype=torch.float64) * 5,
            -torch.rand(32, generator=g) * 4 - 1,  # negative values dominate
            torch.tensor([0.25, -1.0, 0.5]),  # exactly 1: not scaled
            torch.tensor([0.5, 1.001, -0.75]),  # just above 1: scaled
        ]
    return xs


def _probe_branch_free(branch_free, xs: list) -> list:
    """Probe: for each input, the student's output (an attempt record) and what
    ``torch._dynamo.explain`` reports for the student's function (graph and break counts, the
    breaks' reasons), or the error explain raised, as text."""
    seen = []
    for x in xs:
        record = attempt(branch_free, x.clone())
        try:
            report = explain(branch_free, x.clone())
            explained = {
                "graph_count": int(report.graph_count),
                "graph_break_count": int(report.graph_break_count),
                "reasons": _reasons(report),
            }
        except Exception as exc:  # noqa: BLE001 - reported by the check
            explained = {
                "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[
                    :300
                ]
            }
        seen.append({"record": record, "explain": explained})
    return seen


def _check_branch_free(branch_free, hidden: bool) -> None:
    xs = _branch_inputs(hidden)
    seen = branch_free.probe(_probe_branch_free, xs)
    for x, item in zip(xs, seen):
        label = f"branch_free on a tensor of shape {tuple(x.shape)}, max |x| = {x.abs().max().item():.3g}"
        got = call_student(
            Recorded("branch_free", [((), {})], [item["record"]]), name="branch_free"
        )
        want = normalize_scores(x.clone())
        require(
            isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == want.dtype,
            f"{label}: shape and dtype",
            yours=None if not isinstance(got, torch.Tensor) else (tuple(got.shape), got.dtype),
            expected=(tuple(want.shape), want.dtype),
            cause="return a tensor like normalize_scores does",
        )
        require(
            torch.allclose(got, want, rtol=1e-6, atol=1e-6),
            f"{label}: outputs vs normalize_scores",
            yours=f"largest difference {(got - want).abs().max().item():.3g}",
            expected="the same outputs",
            cause="divide by the largest magnitude (x.abs().max()) only when it is above 1: "
            "torch.where(peak > 1, x / peak, x) or x / peak.clamp(min=1)",
        )
        explained = item["explain"]
        if "error" in explained:
            fail(
                f"{label}: torch._dynamo.explain(branch_free)",
                yours=explained["error"],
                expected="1 graph, 0 graph breaks",
                cause="dynamo could not trace the function: use tensor operations only "
                "(torch.where, clamp or torch.cond), no Python decisions on tensor values",
            )
        require(
            explained["graph_count"] == 1 and explained["graph_break_count"] == 0,
            f"{label}: torch._dynamo.explain(branch_free)",
            yours=f"{explained['graph_count']} graph(s), {explained['graph_break_count']} graph "
            f"break(s): {explained['reasons']}",
            expected="1 graph, 0 graph breaks",
            cause="no .item() or Python `if` on a tensor value: keep the choice on the device "
            "(torch.where, clamp or torch.cond); a function dynamo skips has no graph at all",
        )


def check_branch_free(branch_free) -> None:
    """Outputs equal to :func:`normalize_scores` (scaled and unscaled cases), and explain
    reports one graph with no break.

    Raises:
        CheckFailed: different outputs, or a graph break.
    """
    branch_free = student(branch_free, "branch_free")
    _check_branch_free(branch_free, hidden=False)
    passed("branch_free: one graph, no graph break, the same outputs as normalize_scores")


def check_branch_free_hidden(branch_free) -> None:
    """More inputs: float64, 2-D, negative values dominant, largest magnitude exactly 1."""
    branch_free = student(branch_free, "branch_free")
    _check_branch_free(branch_free, hidden=True)
    passed("branch_free agrees with normalize_scores on more shapes and dtypes")


# --------------------------------------------------------------------------- export_model
def make_export_model(kind: str = "conv", seed: int = 0) -> nn.Module:
    """A small model whose class exists only inside this call, as a model class defined in
    someone's notebook: a fresh process cannot import it, and pickle cannot save it by name.

    Args:
        kind: ``"conv"`` (one input, N x 3 x 8 x 8) or ``"two_inputs"`` (features N x 6 and a
            mask N x 6).
        seed: Initial weights. BatchNorm statistics are filled in by a few training-mode
            forward passes, so eval and training mode give different outputs.

    Returns:
        The model, in training mode.
    """

    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.drop = nn.Dropout(0.5)
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            x = F.relu(self.bn(self.conv(x)))
            return self.fc(self.drop(x.mean(dim=(2, 3))))

    class MaskedNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(6, 16)
            self.norm = nn.BatchNorm1d(16)
            self.drop = nn.Dropout(0.3)
            self.fc2 = nn.Linear(16, 2)

        def forward(self, features, mask):
            h = self.drop(F.gelu(self.norm(self.fc1(features * mask))))
            return self.fc2(h)

    torch.manual_seed(seed)
    model = ConvNet() if kind == "conv" else MaskedNet()
    with torch.no_grad():
        for _ in range(3):
            model(*export_inputs(kind, 16, seed=seed + 100))
    return model.train()


def export_inputs(kind: str, batch: int, *, seed: int = 0, device: str = "cpu") -> tuple:
    """Example inputs of :func:`make_export_model`'s models with batch size ``batch``."""
    g = torch.Generator().manual_seed(seed)
    if kind == "conv":
        args = (torch.randn(batch, 3, 8, 8, generator=g) * 2 + 1,)
    else:
        args = (
            torch.randn(batch, 6, generator=g) * 2,
            (torch.rand(batch, 6, generator=g) > 0.3).float(),
        )
    return tuple(a.to(device) for a in args)


def export_range_on_cuda(dim) -> str:
    """Export a small conv net with batch norm, in eval mode, on **fake** CUDA tensors (shapes,
    dtypes and a device, no data: what ``torch.export`` traces with) with ``dim`` for the batch,
    and say what export made of it. Runs on any machine: no GPU is used, yet the CUDA
    operators' shape rules apply. Batch norm on CUDA takes cuDNN's kernel for an eval batch of
    at most 65535 and PyTorch's own above (ATen's ``_select_batch_norm_backend``), so export
    records a guard ``batch <= 65535``, which a named ``Dim`` with no ``max`` forbids.

    Args:
        dim: What marks dimension 0 of the input (``torch.export.Dim("batch")``,
            ``Dim("batch", max=65535)``, ``Dim.DYNAMIC``, ``Dim.AUTO``).

    Returns:
        ``"accepted batch sizes [lo, hi]"`` (the program's range for the batch), or ``"export
        raised <Error>: <first lines>"``.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    with mode, torch.device("cuda"):
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)).eval()
        example = (torch.randn(4, 3, 8, 8),)
    try:
        with mode, quiet_compiler():
            program = torch.export.export(model, example, dynamic_shapes=({0: dim},))
    except Exception as exc:  # noqa: BLE001 - the error is the demo's answer
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()][:2]
        return f"export raised {type(exc).__name__}: " + " / ".join(lines)
    (batch,) = program.range_constraints.values()
    upper = int(batch.upper) if batch.upper.is_Integer else "no limit"
    return f"accepted batch sizes [{int(batch.lower)}, {upper}]"


#: Run in a fresh interpreter: load the exported program, run it on saved inputs.
_LOADER = """
import sys, torch
program = torch.export.load(sys.argv[1])
batches = torch.load(sys.argv[2])
with torch.no_grad():
    outputs = [program.module()(*args) for args in batches]
torch.save([o.cpu() for o in outputs], sys.argv[3])
"""


def run_in_fresh_process(path: str | Path, batches: list[tuple], timeout_s: float = 180) -> list:
    """Load ``path`` with ``torch.export.load`` in a new Python process (which knows nothing of
    the model's class) and run its module on each batch.

    Returns:
        One output tensor (on the CPU) per batch.

    Raises:
        RuntimeError: the process failed (its last lines are in the message) or timed out.
    """
    with tempfile.TemporaryDirectory(prefix="export-check-") as tmp:
        inputs, outputs = Path(tmp) / "inputs.pt", Path(tmp) / "outputs.pt"
        torch.save(batches, inputs)
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _LOADER, str(path), str(inputs), str(outputs)],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                cwd=tmp,  # nothing of the caller's folder (a notebook's modules) is importable
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"loading took more than {timeout_s:.0f} s") from None
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            errors = [ln for ln in lines if "Error" in ln or "error" in ln]
            raise RuntimeError((errors or lines or ["(no output)"])[-1][:400])
        return torch.load(outputs)


#: How a program exported with static shapes refuses another batch size (torch 2.11-2.14).
_SHAPE_REFUSED = re.compile(r"Guard failed|shape\[0\]|size\(\)\[0\]|to be equal to")


def _probe_export(export_model, kind: str, device: str, seed: int, training: bool = True) -> dict:
    """Probe: export a model whose class no other process can import (in training mode, or in
    eval mode without ``training``) with the student's function, then load the file in a fresh
    Python process started from here and run it on the example batch (4) and on a batch of 7;
    hand back the call's outcome, the model's mode after it, the file's size and the outputs
    (CPU tensors), or why loading failed, as text."""
    model = make_export_model(kind, seed=seed).to(device).train(training)
    example = export_inputs(kind, 4, seed=seed, device=device)
    other = export_inputs(kind, 7, seed=seed + 1, device=device)
    with tempfile.TemporaryDirectory(prefix="export-model-") as tmp:
        path = Path(tmp) / "model.pt2"
        seen: dict = {"record": attempt(export_model, model, example, str(path))}
        seen["training_after"] = model.training
        if not seen["record"]["ok"]:
            return seen
        seen["size"] = path.stat().st_size if path.is_file() else None
        if not seen["size"]:
            return seen
        try:
            seen["outputs"] = run_in_fresh_process(path, [example, other])
        except RuntimeError as exc:
            seen["load_error"] = str(exc)
    return seen


def _check_export(export_model, kind: str, device: str, seed: int, training: bool = True) -> None:
    seen = export_model.probe(_probe_export, kind, device, seed, training)
    try:
        call_student(Recorded("export_model", [((), {})], [seen["record"]]), name="export_model")
    except CheckFailed as exc:
        if "Constraints violated" in str(exc):
            fail(
                f"export_model on a {kind} model on {device}",
                yours=str(exc).splitlines()[0][:300],
                expected="a program for every batch size the model's operations accept",
                cause="a named torch.export.Dim('batch') promises every batch size, and export "
                "refuses the promise when an operation's path depends on the size (batch norm on "
                "CUDA uses cuDNN up to a batch of 65535): use torch.export.Dim.DYNAMIC (export "
                "narrows the range as needed) or give the dimension a range, "
                "Dim('batch', max=65535)",
            )
        if "pickle" not in str(exc):
            raise
        fail(
            "export_model on a model whose class is defined inside a function",
            yours=str(exc).splitlines()[0],
            expected="a saved program that needs no class",
            cause="torch.save(model) pickles a reference to the model's class, which "
            "another process (or this one, for a local class) cannot find: use "
            "torch.export.export and torch.export.save",
        )
    mode = "training" if training else "eval"
    require(
        seen["training_after"] is training,
        f"export_model on a model in {mode} mode: the model's mode afterwards",
        yours="training" if seen["training_after"] else "eval",
        expected=mode,
        cause="export in eval mode, then put the model back in the mode it was in: "
        "was_training = model.training; model.eval(); ...; model.train(was_training) "
        "(in a finally: block, so a failed export restores it too)",
    )
    require(
        bool(seen.get("size")),
        "export_model must write the file at `path`",
        yours="no file" if seen.get("size") is None else "an empty file",
        expected="a .pt2 file",
        cause="torch.export.save(exported_program, path)",
    )
    if "load_error" in seen:
        error = seen["load_error"]
        fail(
            "loading the file with torch.export.load in a fresh Python process "
            "(which cannot import the model's class) and running it",
            yours=error,
            expected="an ExportedProgram that runs on its own",
            cause="torch.save(model) and state_dicts need the model's class to load; "
            "TorchScript files are not export programs. Use program = torch.export.export("
            "model, example_inputs, dynamic_shapes=...) and torch.export.save(program, path)"
            if not _SHAPE_REFUSED.search(error)
            else "the program only accepts the example's batch size: export with "
            "dynamic_shapes marking dimension 0 of every input, e.g. "
            "{0: torch.export.Dim.DYNAMIC}",
        )
    got = seen["outputs"]
    model = make_export_model(kind, seed=seed).to(device).eval()
    example = export_inputs(kind, 4, seed=seed, device=device)
    other = export_inputs(kind, 7, seed=seed + 1, device=device)
    with torch.no_grad():
        want = [model(*example).cpu(), model(*other).cpu()]
    # On a GPU, cuDNN may use TF32 for convolutions (its default): a looser tolerance there.
    rtol, atol = (1e-4, 1e-5) if device == "cpu" else (1e-3, 1e-3)
    require(
        isinstance(got, list) and len(got) == 2 and all(isinstance(g, torch.Tensor) for g in got),
        "outputs of the loaded program",
        yours=type(got).__name__,
        expected="one tensor per batch",
        cause="export the model's forward as it is",
    )
    for batch, g, w in zip((4, 7), got, want):
        require(
            g.shape == w.shape and torch.allclose(g, w, rtol=rtol, atol=atol),
            f"output of the loaded program on a batch of {batch} ({kind} model on {device}) vs "
            "the model in eval mode",
            yours=f"largest difference {(g - w).abs().max().item():.3g}"
            if g.shape == w.shape
            else f"shape {tuple(g.shape)}",
            expected="the same outputs",
            cause="export for inference: call model.eval() before torch.export.export, or "
            "dropout stays random and batch norm uses the batch's statistics",
        )


def check_export_model(export_model) -> None:
    """Export a conv net (dropout, batch norm) whose class a fresh process cannot import, load it
    there (a process started from the student's), and compare with the model in eval mode
    (computed here) on the example batch and on a batch of 7.

    Raises:
        CheckFailed: no file, the file does not load or run in a fresh process, a batch size
            other than the example's is refused, or the outputs differ.
    """
    export_model = student(export_model, "export_model")
    _check_export(export_model, "conv", "cpu", seed=0)
    passed("export_model: loads in a fresh process without the class, any batch size, eval outputs")


def check_export_model_hidden(export_model) -> None:
    """A model with two inputs (features and a mask), both with a dynamic batch dimension,
    given in eval mode (and left in it)."""
    export_model = student(export_model, "export_model")
    _check_export(export_model, "two_inputs", "cpu", seed=1, training=False)
    passed("export_model handles a model with two inputs")


def check_export_model_cuda(export_model) -> None:
    """On a GPU: export a CUDA model, load and run it on the GPU in a fresh process."""
    if not cuda_or_not_checked("export_model of a CUDA model"):
        return
    export_model = student(export_model, "export_model")
    _check_export(export_model, "conv", "cuda", seed=2)
    passed("export_model exports a CUDA model that loads and runs on the GPU")


# --------------------------------------------------------------------------- compile_speedup
@kernel_side
def many_small_ops(x: torch.Tensor) -> torch.Tensor:
    """50 tiny elementwise ops: eager pays Python and dispatch (and, on a GPU, a kernel launch)
    for every one; compiled, they become one fused kernel."""
    for _ in range(10):
        x = torch.sin(x) * 1.5 + torch.cos(x) * 0.5
    return x


def warm_caches() -> None:
    """Compile what the checks compile, so Inductor's on-disk cache holds it.

    The first ``torch.compile`` in a process with an empty cache costs about 15 s on a 2-core
    CPU (Inductor builds its C++ support code); with a warm cache about 3 s. The grading
    command runs this once per class and copies the cache into each kernel's own folder.
    """
    for fn, n in ((many_small_ops, 256), (gelu_loop, 512)):
        torch._dynamo.reset()
        compiled = torch.compile(fn)
        for _ in range(2):
            compiled(torch.randn(n))


@kernel_side
def gelu_loop(x: torch.Tensor) -> torch.Tensor:
    """Six tanh-approximated GELUs with a residual, written op by op: 48 small ops."""
    for _ in range(6):
        inner = 0.7978845608 * (x + 0.044715 * x * x * x)
        x = 0.5 * x * (1.0 + torch.tanh(inner)) + 0.1 * x
    return x


def number_attempt(fn, *args, **kwargs) -> dict:
    """:func:`grader.runtime.remote.attempt` for a function that returns a number (inside a probe): a
    subclass of ``float`` or ``int`` (NumPy's ``float64``, say) is handed back as a plain
    ``float``, with its type's name in ``"type"``; anything else without its value."""
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


def _probe_compile_speedup(compile_speedup, fn: Callable, n: int, device: str) -> dict:
    """Probe: the student's ``compile_speedup(fn, x)`` on ``n`` random floats on ``device``,
    from a clean dynamo cache, in the student's process."""
    x = torch.randn(n, device=device)
    torch._dynamo.reset()
    with quiet_compiler():
        return number_attempt(compile_speedup, fn, x)


def _throughput_ratio(fn: Callable, x: torch.Tensor, blocks: int = 15) -> float:
    """Eager / compiled time of ``fn(x)`` on a GPU, timed as throughput: blocks of calls with
    one ``torch.cuda.synchronize()`` before and after each (``torch.utils.benchmark.Timer``
    times that way: its clock synchronizes, once per block), eager and compiled blocks
    interleaved, the fastest block of each.

    The reference synchronizes around every call, so it times each call's latency: launch work
    plus the wait for the GPU. Both are correct timers, and on an idle GPU they nearly agree:
    ``many_small_ops`` is launch-bound (50 launches of about 10 us eager, the recorded
    ``launch_overhead_eager_us``), and its throughput speed-up on an idle H200 was 10.8x (the
    recorded ``compile_small_ops_speedup_cuda``, timed with ``benchmark.Timer``); a call's
    latency adds a few microseconds of kernel and synchronization to each side. When other
    processes share the GPU, a synchronized call also waits for the GPU's time slice: eager and
    compiled latencies both carry that wait and their ratio falls towards 1, while throughput,
    launch-bound either way, does not.

    The fastest block, not the median: a block is a sum of calls, so a pause of the process (a
    busy machine, another thread) lands in it whole, and pauses only add time. Without the
    garbage collector, as timeit (and so ``benchmark.Timer``) times. Called after the reference,
    whose ``torch.compile(fn)`` compiled ``fn`` for this input: compiling it again reuses that
    code.
    """
    compiled = torch.compile(fn)
    for _ in range(3):
        fn(x)
        compiled(x)

    def per_call_s(f, calls: int) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            f(x)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / calls

    # Short blocks, so that some fall between pauses: 5 eager calls (250 kernels, about 2.5 ms
    # on an H200) and 50 compiled ones (about as long).
    eager, fused = [], []
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _ in range(blocks):
            eager.append(per_call_s(fn, 5))
            fused.append(per_call_s(compiled, 50))
    finally:
        if collecting:
            gc.enable()
    return min(eager) / min(fused)


def _reference_speedup(fn, n: int, device: str) -> float:
    """The reference's speed-up of ``fn`` on ``n`` random floats on ``device``, measured here."""
    torch._dynamo.reset()
    x = torch.randn(n, device=device)
    with quiet_compiler():
        return reference(ASSIGNMENT).compile_speedup(fn, x)


def _compile_ratio(compile_speedup, fn, n: int, device: str) -> tuple[float, tuple[float, ...]]:
    """Yours and the speed-ups measured here around it: the reference's just before and just
    after yours (a burst of other work during one of them widens the band instead of failing a
    correct answer: on a loaded 2-core machine one reference measurement of ``gelu_loop`` read
    1615 where the next read 4.3, 2026-11-28), and on a GPU also the throughput ratio
    (:func:`_throughput_ratio`)."""
    before = _reference_speedup(fn, n, device)
    record = compile_speedup.probe(_probe_compile_speedup, fn, n, device)
    mine = call_student(Recorded("compile_speedup", [((), {})], [record]), name="compile_speedup")
    require(
        mine is not None and math.isfinite(mine),
        "compile_speedup must return a float (eager time / compiled time)",
        yours=f"{record.get('repr', mine)} ({record.get('type')})",
        expected="a float such as 4.2",
        cause="return eager_ms / compiled_ms as a Python float",
    )
    refs = (before, _reference_speedup(fn, n, device))
    if device != "cpu":
        torch._dynamo.reset()
        x = torch.randn(n, device=device)
        with quiet_compiler():
            refs += (_throughput_ratio(fn, x),)
    return float(mine), refs


def speedup_agrees(mine: float, refs: tuple[float, ...]) -> bool:
    """Whether a speed-up is above 1 and within a factor 3 of the range of the speed-ups
    measured with it (the reference's before and after it; on a GPU also the throughput one)."""
    return mine > 1.0 and min(refs) / 3 <= mine <= 3 * max(refs)


def _check_speedup(
    compile_speedup, fn, n: int, device: str, label: str, attempts: int = 5, needed: int = 2
) -> None:
    # Calls of ~30 us on a shared machine: two runs of the reference differ by up to 2x, so the
    # band is 3x either way. A pair (yours, the reference) measured during a burst of other work
    # can land anywhere, so pairs are measured up to five times, after a short pause each, and
    # two of them must be in the band. One is not enough: a pause of the process while the eager
    # calls of a wrong answer are timed once lifted one that times compilation (about 100 ms
    # with warm caches) into the band on a loaded CI machine. The listed mistakes land far
    # outside the band (ratios below 0.3) otherwise. Yours runs in your process, the reference
    # in the grading process just before and just after yours, on the same machine; the band
    # spans both. On a GPU it also spans the throughput speed-up (see _throughput_ratio): a
    # shared GPU separates them, and an answer may time either way.
    tries, good = [], 0
    for attempt_number in range(attempts):
        if attempt_number:
            time.sleep(0.5 * attempt_number)
        mine, refs = _compile_ratio(compile_speedup, fn, n, device)
        tries.append(f"{mine:.2f} vs {' to '.join(f'{r:.2f}' for r in sorted(refs))}")
        good += speedup_agrees(mine, refs)
        if good >= needed:
            return
        if good + attempts - attempt_number - 1 < needed:
            break
    require(
        False,
        f"compile_speedup({fn.__name__}, {label}) vs the reference measured just now "
        f"(yours vs the reference, {needed} of up to {attempts} tries must agree: "
        f"{', '.join(tries)})",
        yours=f"{mine:.3g}",
        expected=f"about {' to '.join(f'{r:.2f}' for r in sorted(refs))}",
        cause=(
            "exclude compilation: call the compiled function once (or a few times) before "
            "timing it; and return eager time / compiled time, not the inverse"
            if mine < 1
            else "time both with the module-02 rules: warm-up calls, then the median of several "
            "timed calls (with torch.cuda.synchronize() before reading the clock on a GPU)"
        ),
    )


# ------------------------------------------------------------------ compile_speedup, scripted
#: The virtual clock's script, in ms: an eager call, a compiled call, the compilation (added to
#: the first compiled call), and a slow call (a pause of the process) among every 25 of each.
_SCRIPT_EAGER_MS, _SCRIPT_COMPILED_MS, _SCRIPT_COMPILE_MS = 3.8, 1.0, 400.0
_SCRIPT_SLOW_EAGER_MS, _SCRIPT_SLOW_COMPILED_MS = 40.0, 60.0
#: The speed-up the statement's rules measure on that script: the medians' ratio, 3.8 / 1.0.
SCRIPTED_SPEEDUP = _SCRIPT_EAGER_MS / _SCRIPT_COMPILED_MS
#: The clocks a timing may read, patched on the ``time`` module during the scripted run.
_CLOCKS = ("perf_counter", "monotonic", "time", "process_time")


class _VirtualClock:
    """A clock that moves only when a scripted call says so (ns), read through ``time``'s
    functions by the thread that made it; counts those readings. Other threads (a kernel's
    heartbeat and I/O threads) keep reading the real clocks and are not counted: a reading of
    theirs would make an answer that times with another clock (``torch.utils.benchmark``
    captures ``time.perf_counter`` at import) look as if it read this one."""

    def __init__(self) -> None:
        self.ns = 10**12
        self.reads = 0
        self.thread = threading.get_ident()

    def advance(self, ms: float) -> None:
        self.ns += round(ms * 1e6)

    def reader(self, real, nanoseconds: bool):
        """A stand-in for the ``time`` function ``real``: this clock in the owning thread,
        ``real`` elsewhere."""

        def read():
            if threading.get_ident() != self.thread:
                return real()
            self.reads += 1
            return self.ns if nanoseconds else self.ns / 1e9

        return read


def _probe_compile_speedup_scripted(compile_speedup) -> dict:
    """Probe: the student's ``compile_speedup(fn, x)`` where ``fn`` and ``torch.compile`` are
    scripted and ``time``'s clocks are virtual: an eager call takes 3.8 ms, a compiled one 1.0 ms,
    compilation 400 ms (on the first compiled call), and one call in 25 of each is slow (40 and
    60 ms). Nothing sleeps, so the machine's load does not matter. Returns the outcome and
    whether the virtual clock was read and ``torch.compile`` called (an answer that times with
    another clock, ``torch.utils.benchmark`` for one, is not judged here)."""
    from unittest import mock

    clock = _VirtualClock()
    calls = {"eager": 0, "compiled": 0, "compile": 0}
    inside = []

    def scripted(x):
        if inside:
            n = calls["compiled"] - 1
            clock.advance(_SCRIPT_SLOW_COMPILED_MS if n % 25 == 7 else _SCRIPT_COMPILED_MS)
        else:
            n = calls["eager"]
            calls["eager"] += 1
            clock.advance(_SCRIPT_SLOW_EAGER_MS if n % 25 == 12 else _SCRIPT_EAGER_MS)
        return x * 2.0 + 1.0

    def fake_compile(model=None, *args, **kwargs):
        if model is None:  # torch.compile(mode=...) used as a decorator factory
            return lambda m: fake_compile(m, *args, **kwargs)
        calls["compile"] += 1

        def compiled(*a, **k):
            calls["compiled"] += 1
            if calls["compiled"] == 1:
                clock.advance(_SCRIPT_COMPILE_MS)
            inside.append(True)
            try:
                return model(*a, **k)
            finally:
                inside.pop()

        return compiled

    patches = [mock.patch.object(torch, "compile", fake_compile)]
    for name in _CLOCKS:
        patches.append(mock.patch.object(time, name, clock.reader(getattr(time, name), False)))
        ns_name = f"{name}_ns"
        patches.append(mock.patch.object(time, ns_name, clock.reader(getattr(time, ns_name), True)))
    x = torch.ones(8)
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        record = number_attempt(compile_speedup, scripted, x)
    return {"record": record, "reads": clock.reads, **calls}


def _check_compile_speedup_scripted(compile_speedup) -> None:
    seen = compile_speedup.probe(_probe_compile_speedup_scripted)
    if not (seen["reads"] and seen["compile"] and seen["compiled"] and seen["eager"]):
        return  # timed with another clock, or compiled another way: the real timings judge it
    record = seen["record"]
    mine = call_student(
        Recorded("compile_speedup", [((), {})], [record]),
        name="compile_speedup(scripted_fn, x) on the virtual clock",
    )
    if mine is None:
        return  # not a number: the real timings' check says so
    what = (
        f"compile_speedup on a scripted function and a virtual clock (each eager call "
        f"{_SCRIPT_EAGER_MS} ms, each compiled call {_SCRIPT_COMPILED_MS} ms, compilation "
        f"{_SCRIPT_COMPILE_MS:.0f} ms on the first compiled call, one call in 25 of each a slow "
        f"{_SCRIPT_SLOW_EAGER_MS:.0f} / {_SCRIPT_SLOW_COMPILED_MS:.0f} ms)"
    )
    if abs(mine - SCRIPTED_SPEEDUP) <= 0.03 * SCRIPTED_SPEEDUP:
        return
    if mine == math.floor(SCRIPTED_SPEEDUP) or mine == round(SCRIPTED_SPEEDUP):
        cause = "return the ratio as it is: no int(), //, math.floor or round()"
    elif mine < 1:
        cause = (
            "exclude compilation (call the compiled function before timing it), and return "
            "eager time / compiled time, not the inverse"
        )
    else:
        cause = (
            "time each call on its own and take the median of each side: a mean (or one timing "
            "around a loop of calls) carries the slow calls in"
        )
    fail(
        what,
        yours=f"{mine:.4g}",
        expected=f"{SCRIPTED_SPEEDUP:g} (median eager / median compiled)",
        cause=cause,
    )


def check_compile_speedup(compile_speedup) -> None:
    """First on a scripted function and a virtual clock (exact: 3.8, so a floored ratio, a
    mean or a timed compilation is seen whatever the machine's load; an answer that reads
    another clock is left to the next part); then ``many_small_ops`` on 256 floats on the CPU (launch-bound: compiling removes 50 ops'
    overhead; the reference measures 3x-5x on a 2-core CPU): within a factor 3 of the reference
    measured in the same run, and above 1.

    Raises:
        CheckFailed: not a float, compilation timed, or far from the reference.
    """
    compile_speedup = student(compile_speedup, "compile_speedup")
    _check_compile_speedup_scripted(compile_speedup)
    _check_speedup(compile_speedup, many_small_ops, 256, "cpu", "256 floats on the CPU")
    passed("compile_speedup measures compiled steady state against eager")


def check_compile_speedup_hidden(compile_speedup) -> None:
    """Another launch-bound function."""
    compile_speedup = student(compile_speedup, "compile_speedup")
    _check_speedup(compile_speedup, gelu_loop, 512, "cpu", "512 floats on the CPU")
    passed("compile_speedup agrees with the reference on another function")


def check_compile_speedup_cuda(compile_speedup) -> None:
    """On a GPU: the same function on a CUDA tensor, where timing needs synchronization; within
    a factor 3 of the range of the reference's per-call speed-ups, measured just before and just
    after yours, and the throughput speed-up measured after it (:func:`_throughput_ratio`)."""
    if not cuda_or_not_checked("compile_speedup on CUDA tensors"):
        return
    compile_speedup = student(compile_speedup, "compile_speedup")
    _check_speedup(compile_speedup, many_small_ops, 256, "cuda", "256 floats on the GPU")
    passed("compile_speedup measures CUDA work correctly")
