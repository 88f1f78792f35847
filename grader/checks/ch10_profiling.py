"""Checks for 10_profiling: arithmetic_intensity, predict_bound, train_without_syncs,
fused_step, overlapped_pipeline, temporal_breakdown.

The last three are graded from a **profiler trace** of the student's code, never from a clock:
a probe (course code that runs where the student's code lives: under autograde, in their
kernel) runs the student's function inside a ``record_function`` range named
:data:`WINDOW` and hands back the trace's events as plain data, a list of dicts in Chrome
trace-event form. The check parses them with :mod:`grader.runtime.trace` in the grading process and
judges: synchronizations in the range, kernel launches, copy time hidden behind kernels on
another stream. On a CUDA GPU (the ``_cuda`` checks) the trace is a real Kineto trace from
``torch.profiler``; elsewhere it is the simulated GPU's (``simulated_cuda(kernels=True)`` of
:mod:`grader.runtime.simulate`), which writes the same format, so each check is written once.
One exception: a ``torch.compile``d ``fused_step`` runs Inductor's generated code, which the
simulated GPU cannot play, so it is judged on a CPU trace of that code (Inductor's kernels and
the operators it calls, :attr:`grader.runtime.trace.Trace.cpu_kernels`).

``temporal_breakdown`` is graded on **recorded** traces instead: the real Kineto traces the
course ships in ``traces/`` (A100s, one MI250), read raw (:func:`raw_trace_events`), whole, per
profiler step, and cut into small edge cases.
"""

from __future__ import annotations

import copy
import functools
import gc
import json
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass

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
from grader.runtime import trace as tracing
from grader.runtime.course import reference
from grader.runtime.quiet import captured_stderr
from grader.runtime.remote import Recorded, attempt, attempt_all, outcome, student
from grader.runtime.simulate import RaceError, simulated_cuda

ASSIGNMENT = "10_profiling"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True

#: The ``record_function`` range the probes wrap the student's call in.
WINDOW = "grader::student_call"
#: fused_step may launch at most this many kernels (the reference: 2, addmm and gelu;
#: the unfused chain launches 10).
MAX_FUSED_LAUNCHES = 3
#: ... and on a real GPU, where cuBLAS may launch two kernels for one matmul (a split-K
#: reduction) and the bias may be a copy kernel before the GEMM.
MAX_FUSED_LAUNCHES_CUDA = 5
#: overlapped_pipeline must hide at least this fraction of its copy time behind kernels on
#: another stream. Reference: about 0.8 on the simulated GPU; a serial loop: 0.
MIN_OVERLAP = 0.5


# --------------------------------------------------------------------------- GPU table
@dataclass(frozen=True)
class GpuSpec:
    """Published dense peaks of a GPU (no sparsity).

    Attributes:
        name: Model name.
        tflops: ``"bf16"``, ``"fp16"``, ``"fp32"`` -> dense TFLOP/s. ``"bf16"`` and ``"fp16"``
            are the Tensor Core peaks (fp32 accumulate); ``"fp32"`` is the plain FP32 peak of
            the CUDA cores, not TF32: PyTorch runs float32 matmuls in full FP32 unless TF32 is
            switched on (``torch.backends.cuda.matmul.allow_tf32`` is False by default).
            ``None``: the GPU has no such units (the T4, a Turing GPU, has no bf16 Tensor
            Cores); no exercise case asks for it.
        memory_gb_s: Device memory bandwidth, GB/s (10^9 bytes/s, as datasheets count).
        source: The datasheet the numbers come from.
    """

    name: str
    tflops: dict
    memory_gb_s: float
    source: str

    def ridge(self, dtype: torch.dtype) -> float:
        """The ridge point, FLOP/byte: peak FLOP/s over memory bytes/s."""
        return self.tflops[DTYPE_KEYS[dtype]] * 1e12 / (self.memory_gb_s * 1e9)


DTYPE_KEYS = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}

#: The GPUs of the exercises (Tensor Core figures dense: datasheets quote 2:4 sparsity, 2x).
GPUS = {
    "H100": GpuSpec("NVIDIA H100 SXM5 80GB", {"bf16": 989.4, "fp16": 989.4, "fp32": 66.9}, 3350.0,
                    "NVIDIA H100 Tensor Core GPU datasheet (SXM5)"),
    "A100": GpuSpec("NVIDIA A100 SXM4 80GB", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}, 2039.0,
                    "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM)"),
    "L4": GpuSpec("NVIDIA L4", {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3}, 300.0,
                  "NVIDIA L4 Tensor Core GPU datasheet"),
    "T4": GpuSpec("NVIDIA T4", {"bf16": None, "fp16": 65.0, "fp32": 8.1}, 320.0,
                  "NVIDIA T4 Tensor Core GPU datasheet (fp16 with fp32 accumulate: 65 TFLOPS)"),
}  # fmt: skip


# --------------------------------------------------------------------------- arithmetic_intensity
#: (op, shape, dtype) cases. Exact: matmul, add, relu. Softmax and layer norm: the FLOP count per
#: element is a convention, so the contract is a range (:data:`PER_ELEMENT_FLOPS`), the same op
#: and shape appear in two dtypes (a FLOP count does not depend on the element size).
INTENSITY_CASES = [
    ("matmul", (4096, 4096, 4096), torch.bfloat16),
    ("matmul", (16, 4096, 4096), torch.bfloat16),
    ("matmul", (1, 8192, 8192), torch.float32),
    ("matmul", (8192, 1024, 256), torch.float16),
    ("add", (1024, 1024), torch.float32),
    ("add", (64, 512, 768), torch.bfloat16),
    ("relu", (4096, 4096), torch.float16),
    ("softmax", (4096, 50304), torch.bfloat16),
    ("softmax", (4096, 50304), torch.float32),
    ("layer_norm", (8192, 4096), torch.float32),
    ("layer_norm", (8192, 4096), torch.bfloat16),
]
EXACT_OPS = ("matmul", "add", "relu")
#: The notebook's contract for softmax and layer norm: c FLOPs per element with c in this range
#: (inclusive), 2N elements moved (the input read, the output written; weights not counted),
#: so the intensity is c / (2 * element size). The reference counts 5 and 8.
PER_ELEMENT_FLOPS = (3.0, 10.0)
#: Elements moved per element of the tensor, for the ops counted per element.
MOVED_PER_ELEMENT = {"add": 3, "relu": 2, "softmax": 2, "layer_norm": 2}


def _per_element_count(op: str, intensity: float, dtype: torch.dtype) -> float:
    """The FLOPs per element that an intensity implies under the notebook's byte count."""
    return intensity * MOVED_PER_ELEMENT[op] * dtype.itemsize


def _intensity_cause(op: str, got: float, want: float, dtype: torch.dtype) -> str:
    """The likely cause of an intensity ``got`` where ``want`` was expected."""
    size, ratio = dtype.itemsize, got / want
    if got in (math.floor(want), math.ceil(want), round(want, 1), round(want, 2)):
        return (
            "return the exact quotient FLOPs / bytes as a float: no rounding and no floor "
            "division (//)"
        )
    if op == "matmul" and abs(ratio - 0.5) < 1e-3:
        return "a matmul does 2*m*k*n FLOPs: one multiply and one add per term"
    if abs(ratio - size) < 1e-3 * size:
        return (
            f"bytes are elements times the element size ({size} bytes for {dtype}): count "
            "bytes, not elements"
        )
    if abs(ratio * 8 - 1) < 1e-3:
        return (
            f"the element size is {size} bytes, not {8 * size} (bits): use dtype.itemsize or "
            "tensor.element_size()"
        )
    if op == "matmul":
        return (
            "bytes moved by a matmul: read A (m*k) and B (k*n), write C (m*n), each once, "
            "times the element size"
        )
    return "count every input read and every output written, once each"


def _check_per_element(cases: list[tuple[str, tuple, torch.dtype, float]]) -> None:
    """Softmax and layer norm: the FLOPs per element each intensity implies lie in
    :data:`PER_ELEMENT_FLOPS` and are the same in every dtype of one op and shape.

    Args:
        cases: (op, shape, dtype, the student's intensity) of the per-element ops.
    """
    low, high = PER_ELEMENT_FLOPS
    groups: dict = {}
    for op, shape, dtype, got in cases:
        groups.setdefault((op, tuple(shape)), []).append((dtype, got))
    for (op, shape), seen in groups.items():
        counts = [(dtype, _per_element_count(op, got, dtype)) for dtype, got in seen]
        (first, c1), *others = counts
        for other, c2 in others:
            if abs(c2 - c1) <= 1e-6 * max(c1, c2):
                continue
            if abs(c1 * other.itemsize - c2 * first.itemsize) <= 1e-6 * max(c1, c2) * 8:
                cause = (
                    "your intensity is the same in both dtypes, as if bytes were elements: the "
                    "bytes moved are the elements times dtype.itemsize, so the intensity "
                    "halves from a 16-bit dtype to float32"
                )
            else:
                cause = (
                    "count FLOPs from the shape alone and divide by the elements moved times "
                    "dtype.itemsize"
                )
            fail(
                f"arithmetic_intensity({op!r}, {shape}, ...) in {first} and in {other}",
                yours=f"{c1:.4g} FLOPs per element in {first}, {c2:.4g} in {other}",
                expected="the same FLOP count in every dtype: only the bytes scale with the "
                "element size",
                cause=cause,
            )
        for dtype, got in seen:
            moved, size = MOVED_PER_ELEMENT[op], dtype.itemsize
            count = _per_element_count(op, got, dtype)
            if low - 1e-9 <= count <= high + 1e-9:
                continue
            fail(
                f"arithmetic_intensity({op!r}, {shape}, {dtype})",
                yours=f"{got:.4g} FLOP/byte, i.e. {count:.4g} FLOPs per element over "
                f"{moved}N elements of {size} bytes",
                expected=f"between {low / (moved * size):.4g} and {high / (moved * size):.4g} "
                f"FLOP/byte ({low:g} to {high:g} FLOPs per element)",
                cause=f"the exercise's contract for {op}: {low:g} to {high:g} FLOPs per element "
                "(the reference counts 5 for softmax, 8 for layer norm) over the 2N elements "
                "moved (the input read, the output written; the weights are not counted), "
                "times the element size",
            )


def check_arithmetic_intensity(arithmetic_intensity) -> None:
    """Compare FLOP/byte with the reference on matmuls and elementwise ops (exactly), and hold
    softmax and layer norm to the notebook's contract: 3 to 10 FLOPs per element over 2N
    elements moved, the same count in every dtype.

    Raises:
        CheckFailed: a value off, not a float, a per-element count outside the range or
            different between dtypes, or no ``ValueError`` for an unknown op.
    """
    fn = student(arithmetic_intensity, "arithmetic_intensity")
    calls = [((op, shape, dtype), {}) for op, shape, dtype in INTENSITY_CASES]
    calls.append((("conv3d", (8, 8), torch.float32), {}))
    records = call_student(fn.probe, attempt_all, calls, name="arithmetic_intensity(...)")
    mine = Recorded("arithmetic_intensity", calls, records)
    ref = reference(ASSIGNMENT).arithmetic_intensity
    per_element = []
    for op, shape, dtype in INTENSITY_CASES:
        got = call_student(mine, op, shape, dtype)
        want = ref(op, shape, dtype)
        require(
            isinstance(got, float) and got > 0,
            f"arithmetic_intensity({op!r}, {shape}, {dtype}) must be a positive float",
            yours=got,
            expected=f"{want:.4g}",
            cause="return FLOPs / bytes as a Python float (true division /, not //)",
        )
        if op not in EXACT_OPS:
            per_element.append((op, shape, dtype, got))
        elif abs(got - want) > 1e-6 * want:
            fail(
                f"arithmetic_intensity({op!r}, {shape}, {dtype})",
                yours=f"{got:.6g} FLOP/byte",
                expected=f"{want:.6g} FLOP/byte",
                cause=_intensity_cause(op, got, want, dtype),
            )
    _check_per_element(per_element)
    try:
        call_student(mine, "conv3d", (8, 8), torch.float32)
    except Exception as exc:  # noqa: BLE001 - the student's exception, rebuilt
        if not isinstance(exc.__cause__ or exc, ValueError):
            fail(
                "arithmetic_intensity('conv3d', ...) must raise ValueError",
                yours=str(exc).splitlines()[0],
                expected="ValueError naming the ops it knows",
                cause="raise ValueError for an op the function does not know",
            )
    else:
        fail(
            "arithmetic_intensity('conv3d', ...) must raise ValueError",
            yours="returned a value",
            expected="ValueError",
            cause="an unknown op has no FLOP count: raise ValueError",
        )
    passed(
        f"arithmetic_intensity matches the reference on {len(INTENSITY_CASES)} cases (softmax "
        "and layer norm within 3 to 10 FLOPs per element) and rejects an unknown op"
    )


# --------------------------------------------------------------------------- predict_bound
#: (op, shape, dtype, gpu) cases: the first eleven far from their GPU's ridge point, then
#: square matmuls 2 to 7 % either side of it. Those tell a ridge read in the wrong units:
#: bandwidth in GiB/s (2^30 bytes/s) instead of GB/s puts every ridge 7 % low, a peak in 2^40
#: FLOP/s 10 % high, and float32 on the TF32 Tensor Cores 7x high on the H100. The last one lies
#: 0.003 % below an H100's ridge, where a ridge rounded down to a whole FLOP/byte errs (still
#: 10^10 times float64's rounding away: any correct arrangement of the formula decides it).
#: No case sits at a ridge exactly, where rounding, not the rule, would decide.
BOUND_CASES = [
    ("matmul", (4096, 4096, 4096), torch.bfloat16, "H100"),
    ("matmul", (16, 4096, 4096), torch.bfloat16, "H100"),
    ("matmul", (512, 512, 512), torch.bfloat16, "H100"),
    ("matmul", (256, 4096, 4096), torch.bfloat16, "A100"),
    ("matmul", (256, 4096, 4096), torch.bfloat16, "H100"),
    ("matmul", (1024, 1024, 1024), torch.float32, "T4"),
    ("matmul", (4096, 4096, 4096), torch.float16, "L4"),
    ("matmul", (64, 64, 64), torch.float32, "L4"),
    ("add", (1024, 1024), torch.float32, "H100"),
    ("softmax", (4096, 50304), torch.bfloat16, "A100"),
    ("layer_norm", (8192, 4096), torch.float16, "T4"),
    # close to the ridge: intensity n/3 (16-bit) or n/6 (float32) against the ridge
    ("matmul", (864, 864, 864), torch.bfloat16, "H100"),  # 288 vs 295: memory
    ("matmul", (912, 912, 912), torch.bfloat16, "H100"),  # 304 vs 295: compute
    ("matmul", (448, 448, 448), torch.float16, "A100"),  # 149 vs 153: memory
    ("matmul", (472, 472, 472), torch.bfloat16, "A100"),  # 157 vs 153: compute
    ("matmul", (1176, 1176, 1176), torch.float16, "L4"),  # 392 vs 403: memory
    ("matmul", (147, 147, 147), torch.float32, "T4"),  # 24.5 vs 25.3: memory
    ("matmul", (128, 128, 128), torch.float32, "H100"),  # 21.3 vs 20.0: compute
    ("matmul", (512, 512, 512), torch.float32, "H100"),  # 85 vs 20 (TF32: 148): compute
    ("matmul", (886, 886, 886), torch.bfloat16, "H100"),  # 295.333 vs 295.343: memory
]


def _bound_cause(got, ridge: float, intensity: float, spec: GpuSpec, dtype) -> str:
    """The likely cause of a wrong verdict on a case ``intensity`` FLOP/byte against ``ridge``."""
    rule = (
        "Compare the intensity with the ridge point, peak FLOP/s over memory bytes/s of that GPU "
        "for that dtype (TFLOP/s * 1e12 over GB/s * 1e9): below it the op waits for memory, "
        "above it for the math units"
    )
    key = DTYPE_KEYS[dtype]
    fp32 = (
        f"Float32 uses the plain FP32 peak of the CUDA cores ({spec.tflops['fp32']} TFLOP/s), "
        "not TF32 nor the bf16 Tensor Cores. "
        if dtype == torch.float32
        else f"{dtype} uses its Tensor Core peak, tflops[{key!r}] ({spec.tflops[key]} TFLOP/s). "
    )
    if got not in ("memory", "compute"):
        return 'return the string "memory" or "compute"'
    off = intensity / ridge - 1
    if abs(off) < 0.1 and got == "compute":
        return (
            f"this op lies {-off:.0%} below the ridge point, so your ridge point is too low: "
            "GB/s are 10^9 bytes/s, not 2^30 (GiB/s). " + fp32 + rule
        )
    if abs(off) < 0.1:
        return (
            f"this op lies {off:.0%} above the ridge point, so your ridge point is too high: "
            "TFLOP/s are 10^12 FLOP/s, not 2^40. " + fp32 + rule
        )
    return fp32 + rule


def check_predict_bound(predict_bound) -> None:
    """Compare "memory"/"compute" with the reference on 20 ops and GPUs, 8 of them close to
    the ridge point (units: GB/s, not GiB/s; float32 on the plain FP32 peak).

    Raises:
        CheckFailed: a wrong verdict or a value other than "memory"/"compute".
    """
    fn = student(predict_bound, "predict_bound")
    calls = [((op, shape, dtype, gpu), {}) for op, shape, dtype, gpu in BOUND_CASES]
    records = call_student(fn.probe, attempt_all, calls, name="predict_bound(...)")
    mine = Recorded("predict_bound", calls, records)
    ref = reference(ASSIGNMENT)
    for op, shape, dtype, gpu in BOUND_CASES:
        got = call_student(mine, op, shape, dtype, gpu)
        want = ref.predict_bound(op, shape, dtype, gpu)
        intensity = ref.arithmetic_intensity(op, shape, dtype)
        ridge = GPUS[gpu].ridge(dtype)
        require(
            got == want,
            f"predict_bound({op!r}, {shape}, {dtype}, {gpu!r})",
            yours=got,
            expected=f"{want!r}: {intensity:.4g} FLOP/byte against the {gpu}'s ridge point of "
            f"{ridge:.4g} FLOP/byte for {DTYPE_KEYS[dtype]}",
            cause=_bound_cause(got, ridge, intensity, GPUS[gpu], dtype),
        )
    passed(
        f"predict_bound places all {len(BOUND_CASES)} ops on the right side of their GPU's "
        "ridge point, 7 of them within 7 % of it"
    )


# --------------------------------------------------------------------------- traced runs
def _events_of_profile(prof) -> list[dict]:
    """The Chrome trace events of a finished ``torch.profiler.profile``."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            doc = json.load(f)
    return [e for e in doc.get("traceEvents", []) if isinstance(e, dict) and e.get("ph") == "X"]


def profile_cuda(fn) -> tuple[object, list[dict]]:
    """Run ``fn()`` on the real GPU under ``torch.profiler`` (CPU and CUDA activities), inside
    the :data:`WINDOW` range; return its result and the Kineto trace events."""
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    with captured_stderr():  # Kineto's "USDT: ... profiler_start" lines (grader.runtime.quiet)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            with record_function(WINDOW):
                out = fn()
            torch.cuda.synchronize()
        return out, _events_of_profile(prof)


def _sim_events(sim) -> list[dict]:
    return sim.chrome_trace()


def _on_sim_device(sim, value) -> bool:
    return isinstance(value, torch.Tensor) and value in sim.on_device


def _judged_trace(events: list[dict], what: str) -> tracing.Trace:
    try:
        return tracing.parse(events).within(WINDOW)
    except ValueError as err:
        fail(
            f"the trace of {what} could not be read",
            yours=str(err),
            expected=f"a trace with the {WINDOW!r} range the course put around your call",
            cause="do not stop or replace torch.profiler inside your function",
        )
        raise  # unreachable: fail raises


# --------------------------------------------------------------------------- train_without_syncs
def make_training(seed: int = 0, steps: int = 4):
    """The training problem of the exercise: a small MLP, SGD and batches whose labels use
    -1 for padding (at least one real label per batch)."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 5))
    batches = []
    for _ in range(steps):
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 5, (16,), generator=g)
        y[torch.rand(16, generator=g) < 0.3] = -1
        y[0] = 1
        batches.append((x, y))
    return model, batches


def _traced(events: list[dict], out, key: str = "out", on_device: bool | None = None) -> dict:
    """What a trace probe hands back: the trace ``events``, the student's result under ``key``
    (a copy of the tensor, or ``None`` for anything else), its type's name and, when given,
    whether the result stayed on the device."""
    record = {
        "events": events,
        key: out.detach().clone() if isinstance(out, torch.Tensor) else None,
        "type": type(out).__name__,
    }
    if on_device is not None:
        record["on_device"] = on_device
    return record


def _on_cuda(value) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "cuda"


def _probe_train_simulated(train_without_syncs) -> dict:
    """Probe: the student's loop on the simulated GPU (kernel model), inside the range."""
    model, batches = make_training()
    with simulated_cuda(kernels=True, virtual_time=True, allow_real_gpu=True) as sim:
        model.to("cuda")
        batches = [(x.to("cuda"), y.to("cuda")) for x, y in batches]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with torch.profiler.record_function(WINDOW):
            out = train_without_syncs(model, batches, optimizer)
        on_device = _on_sim_device(sim, out)
        events = _sim_events(sim)
    return _traced(events, out, "losses", on_device)


def _require_losses(seen: dict, expected: torch.Tensor) -> None:
    require(
        seen["losses"] is not None,
        "train_without_syncs must return a tensor of the losses",
        yours=seen["type"],
        expected="a 1-D tensor with one loss per step, on the model's device",
        cause="stack the detached losses: torch.stack(losses)",
    )
    got = seen["losses"].detach().float().cpu().flatten()
    require(
        got.shape == expected.shape and torch.allclose(got, expected, rtol=1e-4, atol=1e-5),
        "the losses of the training steps",
        yours=[round(v, 5) for v in got.tolist()[:6]],
        expected=[round(v, 5) for v in expected.tolist()],
        cause="same steps as train_with_syncs: the mean cross-entropy over the labels that are "
        "not -1 (ignore_index=-1), zero_grad, backward, step, for every batch",
    )


def _require_on_device(device_ok: bool) -> None:
    require(
        device_ok,
        "the losses must stay on the model's device",
        yours="a tensor on the host",
        expected="a tensor on the device (a copy to the host is a synchronization)",
        cause="return torch.stack(losses) without .cpu() or .tolist()",
    )


def _require_no_syncs(trace: tracing.Trace, where: str) -> None:
    syncs = trace.syncs
    if syncs:
        names = ", ".join(sorted({e.name for e in syncs}))
        copies = [c.name for c in trace.copies if "DtoH" in c.name]
        fail(
            f"train_without_syncs made the host wait for the device {len(syncs)} time(s) ({where})",
            yours=f"{len(syncs)} x {names}" + (f" after {copies[:3]}" if copies else ""),
            expected="0 synchronizations: the loop queues work and never waits for it",
            cause="the host waits when it reads a device value (.item(), float(t), print(t), "
            "if t:, .cpu(), .tolist(), torch.tensor(list of tensors)) or needs a size that "
            "depends on the data (boolean-mask indexing x[mask], nonzero, argwhere, unique, "
            "F.one_hot without num_classes). Keep the losses as tensors (loss.detach()), and "
            "replace the mask by ignore_index=-1 in F.cross_entropy",
        )


def reference_losses(device: str = "cpu") -> torch.Tensor:
    """The reference train_without_syncs's losses on the exercise's problem."""
    model, batches = make_training()
    model.to(device)
    batches = [(x.to(device), y.to(device)) for x, y in batches]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    out = reference(ASSIGNMENT).train_without_syncs(model, batches, optimizer)
    return out.detach().float().cpu().flatten()


def check_train_without_syncs(train_without_syncs) -> None:
    """Check the losses against the reference, then that the trace of the loop on the
    simulated GPU has no synchronization.

    Raises:
        CheckFailed: different losses, a result on the host, or a synchronization.
    """
    fn = student(train_without_syncs, "train_without_syncs")
    seen = call_student(
        fn.probe, _probe_train_simulated,
        name="train_without_syncs(model, batches, optimizer) on the simulated GPU",
    )  # fmt: skip
    trace = _judged_trace(seen["events"], "train_without_syncs")
    _require_losses(seen, reference_losses())
    _require_no_syncs(trace, "simulated GPU trace")
    _require_on_device(seen["on_device"])
    passed(
        f"train_without_syncs: same losses, {trace.launch_count} kernel launches and 0 "
        "synchronizations in the trace (simulated GPU)"
    )


def _probe_train_cuda(train_without_syncs) -> dict:
    """Probe: the student's loop on the real GPU under torch.profiler (after a warm-up run on
    a copy of the model, so cuBLAS and the allocator are initialised outside the trace)."""
    model, batches = make_training()
    model.cuda()
    batches = [(x.cuda(), y.cuda()) for x, y in batches]
    warm = copy.deepcopy(model)
    train_without_syncs(warm, batches, torch.optim.SGD(warm.parameters(), lr=0.1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    out, events = profile_cuda(lambda: train_without_syncs(model, batches, optimizer))
    return _traced(events, out, "losses", _on_cuda(out))


def check_train_without_syncs_cuda(train_without_syncs) -> None:
    """On a real GPU: the Kineto trace of the loop has no synchronizing runtime call."""
    if not cuda_or_not_checked("train_without_syncs from a real Kineto trace"):
        return
    fn = student(train_without_syncs, "train_without_syncs")
    seen = call_student(fn.probe, _probe_train_cuda, name="train_without_syncs on this GPU")
    trace = _judged_trace(seen["events"], "train_without_syncs")
    _require_losses(seen, reference_losses("cuda"))
    _require_no_syncs(trace, "Kineto trace on this GPU")
    _require_on_device(seen["on_device"])
    passed(f"train_without_syncs: 0 synchronizations in the Kineto trace ({trace.summary()})")


# --------------------------------------------------------------------------- fused_step
def unfused_step(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The exercise's launch-bound step: a linear layer and a tanh-approximated GELU written
    out op by op (10 kernels)."""
    h = x @ w + b
    return 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * h**3)))


def fused_inputs(seed: int = 0, m: int = 64, k: int = 256, n: int = 256):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(m, k, generator=g),
        torch.randn(k, n, generator=g) / k**0.5,
        torch.randn(n, generator=g),
    )


def profile_cpu(fn) -> tuple[object, list[dict]]:
    """Run ``fn()`` on the CPU under ``torch.profiler`` (CPU activity), inside the
    :data:`WINDOW` range; return its result and the trace events."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with captured_stderr():  # Kineto's "USDT: ... profiler_start" lines (grader.runtime.quiet)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with record_function(WINDOW):
                out = fn()
        return out, _events_of_profile(prof)


def _probe_fused_compiled(fused_step) -> dict | None:
    """Probe: the student's step on CPU tensors, when it runs ``torch.compile``d code: compiled
    afresh (``torch._dynamo.reset()``, so code compiled earlier is not reused) with Inductor's
    kernels recorded in traces (``torch._inductor.config.cpp.enable_kernel_profile``), and the
    trace of one call after two warm-up calls. None for a step that runs no compiled code
    (TorchDynamo is not even loaded after a call, or the trace has no compiled region), that
    fails on CPU tensors, or where Inductor cannot record its kernels (not Linux or Windows):
    the simulated GPU judges it."""
    if sys.platform not in ("linux", "win32"):
        return None
    x, w, b = fused_inputs()
    try:
        if "torch._dynamo" not in sys.modules:
            fused_step(x, w, b)  # a compiled step loads TorchDynamo on its first call
            if "torch._dynamo" not in sys.modules:
                return None
        import torch._dynamo
        import torch._inductor.config

        torch._dynamo.reset()
        with torch._inductor.config.patch({"cpp.enable_kernel_profile": True}):
            for _ in range(2):
                fused_step(x, w, b)
            out, events = profile_cpu(lambda: fused_step(x, w, b))
    except Exception:  # noqa: BLE001 - judged (and its error shown) on the simulated GPU
        return None
    if not tracing.parse(events).compiled_regions:
        return None
    return {**_traced(events, out), "compiled": True}


def _probe_fused_simulated(fused_step) -> dict:
    """Probe: a compiled step on the CPU (:func:`_probe_fused_compiled`); any other: one call
    of the student's step on the simulated GPU, inside the range."""
    compiled = _probe_fused_compiled(fused_step)
    if compiled is not None:
        return compiled
    with simulated_cuda(kernels=True, virtual_time=True, allow_real_gpu=True) as sim:
        x, w, b = (t.to("cuda") for t in fused_inputs())
        with torch.profiler.record_function(WINDOW):
            out = fused_step(x, w, b)
        events = _sim_events(sim)
    return _traced(events, out)


def _judge_fused(
    seen: dict, expected: torch.Tensor, where: str, limit: int = MAX_FUSED_LAUNCHES
) -> tracing.Trace:
    require(
        seen["out"] is not None,
        "fused_step must return a tensor",
        yours=seen["type"],
        expected=f"a tensor of shape {tuple(expected.shape)}",
        cause="return the activations",
    )
    got = seen["out"].detach().float().cpu()
    require(
        got.shape == expected.shape and torch.allclose(got, expected, rtol=1e-4, atol=1e-4),
        "fused_step must compute what unfused_step computes",
        yours=f"max difference {(got - expected).abs().max().item():.3g}"
        if got.shape == expected.shape
        else tuple(got.shape),
        expected="within 1e-4",
        cause="the GELU here is the tanh approximation: F.gelu(h, approximate='tanh'), "
        "not the default erf form",
    )
    trace = _judged_trace(seen["events"], "fused_step")
    if seen.get("compiled"):
        kernels = trace.cpu_kernels
        if len(kernels) > limit:
            regions = len(trace.compiled_regions)
            fail(
                f"fused_step runs {len(kernels)} kernels (torch.compile'd code, CPU trace of "
                "Inductor's kernels)",
                yours=f"{len(kernels)} kernels in {regions} compiled region(s): "
                f"{[k.name for k in kernels][:12]}",
                expected=f"at most {limit}: the matmul (with the bias) and one fused kernel "
                "for the GELU chain",
                cause="Inductor fuses the pointwise ops of one graph into one kernel; "
                + (
                    f"your function was split into {regions} graphs, each compiled on its own "
                    "(a graph break: print, .item(), numpy or a data-dependent branch inside "
                    "the compiled function): keep the step free of them "
                    "(torch._dynamo.explain(fn)(x, w, b) lists the breaks)"
                    if regions > 1
                    else "this compiled code runs its operators one by one (a backend that "
                    "does not generate kernels, such as 'eager' or 'aot_eager'?): compile with "
                    "the default backend, or use fused operators"
                ),
            )
        return trace
    launches = trace.launch_count
    if launches > limit:
        names = [k.name for k in trace.kernels][:12]
        fail(
            f"fused_step launched {launches} kernels ({where})",
            yours=f"{launches} launches: {names}",
            expected=f"at most {limit} (the unfused chain: 10)",
            cause="each PyTorch operator is a kernel: use fused operators, torch.addmm(b, x, w) "
            "for the matmul and bias, F.gelu(h, approximate='tanh') for the activation, or "
            "torch.compile the step, which fuses the elementwise chain into one kernel",
        )
    return trace


def check_fused_step(fused_step) -> None:
    """Check the values, then the number of kernels one call runs: for ``torch.compile``d code,
    Inductor's generated kernels and the operators it calls, read from a CPU trace; for any
    other step, the launches in the simulated GPU's trace.

    Raises:
        CheckFailed: different values or more than :data:`MAX_FUSED_LAUNCHES` kernels.
    """
    fn = student(fused_step, "fused_step")
    seen = call_student(
        fn.probe, _probe_fused_simulated, name="fused_step(x, w, b) (simulated GPU)"
    )
    expected = reference(ASSIGNMENT).fused_step(*fused_inputs()).float()
    trace = _judge_fused(seen, expected, "simulated GPU trace")
    if seen.get("compiled"):
        passed(
            f"fused_step: {len(trace.cpu_kernels)} kernels instead of 10 (torch.compile'd: "
            "Inductor's kernels in a CPU trace)"
        )
        return
    passed(f"fused_step: {trace.launch_count} kernel launches instead of 10 (simulated GPU)")


def _probe_fused_cuda(fused_step) -> dict:
    """Probe: the student's step on the real GPU, 3 warm-up calls (compilation, CUDA graph
    capture), then one call under torch.profiler."""
    x, w, b = (t.cuda() for t in fused_inputs())
    for _ in range(3):
        fused_step(x, w, b)
    out, events = profile_cuda(lambda: fused_step(x, w, b))
    return _traced(events, out)


def check_fused_step_cuda(fused_step) -> None:
    """On a real GPU: values, and at most :data:`MAX_FUSED_LAUNCHES_CUDA` launches (kernels or
    CUDA graph replays) in the Kineto trace; torch.compile and CUDA graphs pass here."""
    if not cuda_or_not_checked("fused_step's kernel launches in a real Kineto trace"):
        return
    fn = student(fused_step, "fused_step")
    seen = call_student(fn.probe, _probe_fused_cuda, name="fused_step on this GPU")
    x, w, b = (t.cuda() for t in fused_inputs())
    expected = reference(ASSIGNMENT).fused_step(x, w, b).float().cpu()
    trace = _judge_fused(seen, expected, "Kineto trace on this GPU", MAX_FUSED_LAUNCHES_CUDA)
    passed(f"fused_step: {trace.launch_count} launches on this GPU ({trace.summary()})")


# --------------------------------------------------------------------------- overlapped_pipeline
def make_pipeline(seed: int = 0, n: int = 8, rows: int = 256, width: int = 512):
    """The exercise's model (an MLP) and CPU batches."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(width, 2 * width), nn.ReLU(), nn.Linear(2 * width, width))
    g = torch.Generator().manual_seed(seed + 1)
    return model, [torch.randn(rows, width, generator=g) for _ in range(n)]


#: Simulated host-to-device bandwidth for the pipeline, GB/s: a 512 KB batch copies in about
#: the time the MLP takes on it, as in a balanced input pipeline.
PIPELINE_H2D_GBPS = 32.0


def _probe_pipeline_simulated(overlapped_pipeline) -> dict:
    """Probe: the student's pipeline on the simulated GPU (CPU batches in pageable memory)."""
    model, batches = make_pipeline()
    with simulated_cuda(
        kernels=True, virtual_time=True, allow_real_gpu=True, h2d_gbps=PIPELINE_H2D_GBPS
    ) as sim:
        model.to("cuda")
        try:
            with torch.no_grad(), torch.profiler.record_function(WINDOW):
                out = overlapped_pipeline(model, batches, torch.device("cuda:0"))
        except RaceError as err:
            return {"race": str(err), "kind": err.kind}
        sim.synchronize()
        events = _sim_events(sim)
        on_device = _on_sim_device(sim, out)
    return {"race": None, **_traced(events, out, on_device=on_device)}


#: The memory-safety case: the same pipeline on a simulated GPU whose kernels take this many
#: times their roofline time (a forward of about 0.8 ms a batch against a 16 us copy), so the
#: compute stream runs far behind the host and the copies. A batch the loop frees while the
#: model still reads it is then still being read when its memory is handed out again, however
#: much host work (launches) the loop does per batch.
PIPELINE_SLOW_KERNELS = 50.0


def _probe_pipeline_memory(overlapped_pipeline) -> dict:
    """Probe: the student's pipeline on a compute-bound simulated GPU, then a neighbour's
    allocation of a batch's size on every side stream (PyTorch hands pooled streams out again).
    Without ``record_stream`` the caching allocator reuses a batch's memory, allocated on the
    copy stream, while the compute stream still reads it: a :class:`RaceError`."""
    model, batches = make_pipeline()
    with simulated_cuda(
        kernels=True, virtual_time=True, allow_real_gpu=True, h2d_gbps=PIPELINE_H2D_GBPS,
        kernel_time_scale=PIPELINE_SLOW_KERNELS,
    ) as sim:  # fmt: skip
        model.to("cuda")
        try:
            with torch.no_grad():
                out = overlapped_pipeline(model, batches, "cuda:0")  # a str this time
            del out
            gc.collect()
            for stream in sim.streams:
                if stream is not sim.default:
                    with torch.cuda.stream(stream):
                        sim.device_tensor(torch.empty_like(batches[0]))
        except RaceError as err:
            return {"race": str(err), "kind": err.kind}
    return {"race": None, "kind": None}


#: The host path's case: a small pipeline run with ``device="cpu"``.
HOST_PIPELINE = {"n": 3, "rows": 16, "width": 32}


def _probe_pipeline_host(overlapped_pipeline) -> dict:
    """Probe: the student's pipeline with ``device="cpu"`` (a str) while a (simulated) GPU is
    there: the statement's host path, which must neither copy to the GPU nor make streams.
    Hands back the call's record (its outputs) and whether the GPU was used."""
    model, batches = make_pipeline(**HOST_PIPELINE)
    with simulated_cuda(kernels=True, virtual_time=True, allow_real_gpu=True) as sim:
        with torch.no_grad():
            record = attempt(overlapped_pipeline, model, batches, "cpu")
        gpu_used = len(sim.streams) > 1 or sim.transfers > 0
    return {"record": record, "gpu_used": gpu_used}


def _judge_pipeline_host(seen: dict) -> None:
    """The host path's outputs, compared here with the model run on each batch."""
    label = "overlapped_pipeline(model, batches, 'cpu') on a machine with a GPU"
    got = call_student(Recorded(label, [((), {})], [seen["record"]]), name=label)
    require(
        not seen["gpu_used"],
        f"{label}: the host path",
        yours="streams made or batches copied to the GPU",
        expected="the model run on each batch on the CPU, no stream, no copy to the GPU",
        cause="decide from the device asked for: device = torch.device(device); use the "
        'streams only when device.type == "cuda" (and CUDA is available)',
    )
    model, batches = make_pipeline(**HOST_PIPELINE)
    with torch.no_grad():
        want = torch.stack([model(x) for x in batches])
    require(
        isinstance(got, torch.Tensor)
        and got.shape == want.shape
        and got.device.type == "cpu"
        and torch.allclose(got.detach().float(), want, rtol=1e-5, atol=1e-6),
        f"{label} must return model(batch) for every batch, stacked, on the CPU",
        yours=f"shape {tuple(got.shape)} on {got.device}"
        if isinstance(got, torch.Tensor)
        else type(got).__name__,
        expected=f"torch.stack([model(x) for x in batches]), shape {tuple(want.shape)}",
        cause="without CUDA, or for a non-CUDA device, just move each batch and compute",
    )


def _judge_pipeline_memory(seen: dict) -> None:
    if seen["kind"] == "read_before_ready":
        _fail_read_before_ready(seen["race"])
    if seen["race"]:
        fail(
            "a batch's memory was handed to new work while the model still read it "
            "(simulated caching allocator, compute-bound GPU)",
            yours=seen["race"],
            expected="each batch marked as used by the compute stream, so the allocator waits "
            "for the compute stream's work before reusing its memory",
            cause="the batch was allocated on the copy stream and is read on the compute "
            "stream: call x.record_stream(torch.cuda.current_stream()) on each batch before "
            "the model uses it (record_stream on the copy stream, where it was allocated, does "
            "nothing). In a copy-bound pipeline the reuse happens after the reads end by luck; "
            "on a compute-bound one it overwrites a batch that is still being read",
        )


def _fail_read_before_ready(race: str) -> None:
    fail(
        "a kernel read a batch before its copy to the GPU had finished (simulated GPU)",
        yours=race,
        expected="the compute stream waits for each batch's copy before using it",
        cause="call torch.cuda.current_stream().wait_stream(copy_stream) (or wait on an "
        "event recorded after the copy) before running the model on the batch",
    )


def _expected_pipeline(device: str = "cpu") -> torch.Tensor:
    model, batches = make_pipeline()
    model.to(device)
    with torch.no_grad():
        return torch.stack([model(x.to(device)) for x in batches]).float().cpu()


def _judge_pipeline(seen: dict, expected: torch.Tensor, where: str) -> tracing.Trace:
    """Judge one run: its outputs, then the overlap in its trace."""
    trace = _judge_pipeline_run(seen, expected)
    _require_overlap([trace], where)
    return trace


def _judge_pipeline_run(seen: dict, expected: torch.Tensor) -> tracing.Trace:
    """Judge one run's result (a race, the outputs, where they live); return its trace."""
    if seen.get("race"):
        if seen.get("kind") == "reuse_while_read":
            _judge_pipeline_memory(seen)
        _fail_read_before_ready(seen["race"])
    require(
        seen["out"] is not None,
        "overlapped_pipeline must return a tensor",
        yours=seen["type"],
        expected=f"the stacked outputs, shape {tuple(expected.shape)}",
        cause="return torch.stack(outputs)",
    )
    got = seen["out"].detach().float().cpu()
    require(
        got.shape == expected.shape and torch.allclose(got, expected, rtol=1e-4, atol=1e-4),
        "overlapped_pipeline must return model(batch) for every batch, in order, stacked",
        yours=f"shape {tuple(got.shape)}"
        + (f", max difference {(got - expected).abs().max().item():.3g}" if got.shape == expected.shape else ""),
        expected=f"shape {tuple(expected.shape)}, the same values",
        cause="a batch used before its copy finished holds stale data: make the compute "
        "stream wait for the copy (wait_stream or an event) before using each batch",
    )  # fmt: skip
    require(
        seen["on_device"],
        "the outputs must stay on the device",
        yours="a tensor on the host",
        expected="a tensor on the device",
        cause="do not copy the result back to the host",
    )
    return _judged_trace(seen["events"], "overlapped_pipeline")


def _require_overlap(traces: list[tracing.Trace], where: str) -> None:
    """At least :data:`MIN_OVERLAP` of the copy time hidden in the best of the ``traces`` (runs
    of the same pipeline); the cause named from the last one."""
    fractions = [t.overlap_fraction() for t in traces]
    if max(fractions) < MIN_OVERLAP:
        trace = traces[-1]
        copies = trace.host_to_device_copies
        kernel_streams = {k.stream for k in trace.kernels}
        copy_streams = {c.stream for c in copies}
        if any("pageable" in c.name.lower() for c in copies):
            cause = "copies from pageable memory cannot overlap: pin each batch (x.pin_memory())"
        elif copy_streams & kernel_streams:
            cause = "the copies run on the compute stream, behind the kernels: issue them inside `with torch.cuda.stream(copy_stream):`"
        else:
            cause = "issue the copy of batch i+1 before computing on batch i, and wait for each batch's copy alone (not for all copies at once)"
        fail(
            f"the copies to the GPU must overlap the compute ({where})",
            yours=f"{', '.join(f'{f:.0%}' for f in fractions)} of the copy time hidden behind "
            "kernels on another stream" + (f" in {len(traces)} runs" if len(traces) > 1 else ""),
            expected=f"at least {MIN_OVERLAP:.0%} (the reference: about 80%)",
            cause=cause,
        )


def check_overlapped_pipeline(overlapped_pipeline) -> None:
    """Check the outputs, then the fraction of copy time hidden behind compute in the trace
    (simulated GPU).

    Raises:
        CheckFailed: wrong outputs (or a batch read before its copy landed), outputs on the
            host, less than :data:`MIN_OVERLAP` of the copy time overlapped, or, on a
            compute-bound simulated GPU (:data:`PIPELINE_SLOW_KERNELS`), a batch's memory
            reused while the model still reads it (no ``record_stream``).
    """
    fn = student(overlapped_pipeline, "overlapped_pipeline")
    seen = call_student(
        fn.probe, _probe_pipeline_simulated,
        name="overlapped_pipeline(model, batches, 'cuda:0') (simulated GPU)",
    )  # fmt: skip
    trace = _judge_pipeline(seen, _expected_pipeline(), "simulated GPU trace")
    memory = call_student(
        fn.probe, _probe_pipeline_memory,
        name="overlapped_pipeline(model, batches, 'cuda:0') on a compute-bound simulated GPU",
    )  # fmt: skip
    _judge_pipeline_memory(memory)
    _judge_pipeline_host(
        call_student(
            fn.probe, _probe_pipeline_host, name="overlapped_pipeline(model, batches, 'cpu')"
        )
    )
    passed(
        f"overlapped_pipeline hides {trace.overlap_fraction():.0%} of its copy time behind "
        "compute (simulated GPU trace) and keeps each batch's memory until the model has read it"
    )


#: The real-GPU pipeline: 8 pinned batches of 1024 x 4096 fp32 (16 MB) through a
#: 4096-wide MLP, so the compute per batch is several times the copy.
CUDA_PIPELINE = {"n": 8, "rows": 1024, "width": 4096}


def _probe_pipeline_cuda(overlapped_pipeline) -> dict:
    """Probe: the student's pipeline on the real GPU under torch.profiler (pinned batches)."""
    model, batches = make_pipeline(**CUDA_PIPELINE)
    model.cuda()
    batches = [x.pin_memory() for x in batches]
    device = torch.device("cuda:0")
    with torch.no_grad():
        overlapped_pipeline(model, batches[:2], device)  # warm-up
        out, events = profile_cuda(lambda: overlapped_pipeline(model, batches, device))
    return _traced(events, out, on_device=_on_cuda(out))


#: Runs of the real-GPU pipeline the check may make: the overlap of the best counts, and the
#: outputs of every run must be right. A run is repeated only when its overlap is too low.
#: Why: on an H200 the eight copies take about 2.6 ms in all (16 MB at the recorded 51.6 GB/s
#: pinned) and one batch's compute about 2.7 ms (137 GFLOP at the recorded 50.8 TFLOP/s fp32).
#: An answer that issues every copy before its first kernel, as it may, loses the overlap of
#: the copies that land before that kernel starts: a host preempted for about 1.3 ms between
#: the two (a loaded machine), or the GPU serving another process then, leaves less than half
#: hidden in that run. The listed mistakes hide none in any run (the copies on the compute
#: stream, or the compute waiting for all of them).
CUDA_PIPELINE_RUNS = 3


def check_overlapped_pipeline_cuda(overlapped_pipeline) -> None:
    """On a real GPU: outputs, and the overlap fraction read from the Kineto trace, in up to
    :data:`CUDA_PIPELINE_RUNS` runs (the outputs of each must be right; the best overlap counts)."""
    if not cuda_or_not_checked("overlapped_pipeline's copy/compute overlap in a Kineto trace"):
        return
    fn = student(overlapped_pipeline, "overlapped_pipeline")
    expected = _expected_pipeline_cuda()
    traces = []
    for run in range(CUDA_PIPELINE_RUNS):
        if run:
            time.sleep(0.5 * run)  # let a burst of other work pass
        seen = call_student(fn.probe, _probe_pipeline_cuda, name="overlapped_pipeline on this GPU")
        traces.append(_judge_pipeline_run(seen, expected))
        if traces[-1].overlap_fraction() >= MIN_OVERLAP:
            break
    _require_overlap(traces, "Kineto trace on this GPU")
    best = max(t.overlap_fraction() for t in traces)
    passed(f"overlapped_pipeline hides {best:.0%} of its copy time on this GPU")


def _expected_pipeline_cuda() -> torch.Tensor:
    model, batches = make_pipeline(**CUDA_PIPELINE)
    model.cuda()
    with torch.no_grad():
        return torch.stack([model(x.cuda()) for x in batches]).float().cpu()


# --------------------------------------------------------------------------- temporal_breakdown
#: The keys temporal_breakdown returns, all in microseconds.
BREAKDOWN_KEYS = ("span_us", "busy_us", "idle_us", "compute_us", "non_compute_us")
#: The categories of the GPU events in the exercise's contract (Kineto's; the same as the trace
#: reader's). ``cuda_sync`` records carry an ``args.stream`` too but are host waits, and
#: ``gpu_user_annotation`` events are ``record_function`` ranges drawn on the GPU's rows.
BREAKDOWN_GPU_CATS = tracing.GPU_CATS
#: The real trace of the visible check: 79 kernels, 16 copies, 3 memsets, 41 ``cuda_sync``
#: records, host events; a GPU busy 0.3 % of its 16 s span.
VISIBLE_TRACE = "a100_simple_add"
#: Rank 0 of the 2-rank DDP run (21 NCCL kernels on stream 40) and its profiler steps.
DDP_TRACE = "a100_ddp_nccl_2ranks"
DDP_STEPS = ("ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6")


def _x(cat: str, name: str, ts: float, dur: float, stream: int | None = None) -> dict:
    event = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}
    if stream is not None:
        event["args"] = {"stream": stream}
    return event


#: The worked example of the exercise's text, and what it states the answer is.
WORKED_EXAMPLE = [
    _x("cpu_op", "aten::mm", 0, 50),
    _x("kernel", "ampere_sgemm_128x64_nn", 10, 30, 7),
    _x("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", 30, 20, 40),
    _x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 60, 5, 7),
    _x("gpu_user_annotation", "## backward ##", 10, 70),
]
WORKED_EXAMPLE_ANSWER = {
    "span_us": 55.0,
    "busy_us": 45.0,
    "idle_us": 10.0,
    "compute_us": 30.0,
    "non_compute_us": 15.0,
}


@functools.cache
def _shipped_events(name: str) -> tuple:
    return tuple(tracing.real_events(name))


def _copy_event(event: dict) -> dict:
    out = {**event}
    args = out.get("args")
    if type(args) is dict:
        out["args"] = {**args}
    return out


def real_trace_names() -> list[str]:
    """The names of the real traces shipped in ``traces/`` (``a100_simple_add``, ...)."""
    return tracing.real_names()


def raw_trace_events(name: str) -> list[dict]:
    """The raw ``traceEvents`` of a shipped real trace, as ``json.load`` reads them: a fresh
    copy at each call (the file is read once per process), so code that edits its input
    changes nothing for the next caller.

    Raises:
        FileNotFoundError: no such trace; the message lists those there are.
    """
    return [_copy_event(e) for e in _shipped_events(name)]


def _gpu_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in BREAKDOWN_GPU_CATS]


def _step_window(name: str, step: str) -> list[dict]:
    """The events of one profiler step: those that start inside its ``ProfilerStep#n`` range
    (the GPU work of a step starts after the calls that launched it, inside the same step in
    the DDP trace: 1258 GPU events in each), as they are in the cache (not copied)."""
    events = _shipped_events(name)
    (mark,) = [e for e in events if e.get("ph") == "X" and e.get("name") == step]
    start, end = mark["ts"], mark["ts"] + mark["dur"]
    return [e for e in events if e.get("ph") == "X" and "ts" in e and start <= e["ts"] < end]


def breakdown_case_events(case: tuple, fresh: bool = True) -> list[dict]:
    """The events of one case of the checks, built where it runs: ``("trace", name)`` a whole
    shipped trace, ``("step", name, "ProfilerStep#n")`` one profiler step of it, ``("events",
    label, events, hint)`` events given as they are.

    Args:
        case: The case.
        fresh: Copy every event (for the student's function, which may edit its input); the
            grading side reads the cached events themselves.
    """
    kind = case[0]
    if kind == "trace":
        events = list(_shipped_events(case[1]))
    elif kind == "step":
        events = _step_window(case[1], case[2])
    elif kind == "events":
        events = list(case[2])
    else:
        raise ValueError(f"unknown case {case!r}")
    return [_copy_event(e) for e in events] if fresh else events


def _case_label(case: tuple) -> str:
    if case[0] == "trace":
        return f"the real trace {case[1]}"
    if case[0] == "step":
        return f"{case[2]} of the real trace {case[1]}"
    return case[1]


def _case_hint(case: tuple) -> str:
    return case[3] if case[0] == "events" else ""


def _probe_breakdowns(temporal_breakdown, cases: list) -> list:
    """Probe: :func:`attempt` ``temporal_breakdown`` on each case's events, built here (the
    shipped traces are read where the student's code runs, not sent to it)."""
    return [attempt(temporal_breakdown, breakdown_case_events(case)) for case in cases]


def _tolerance(events: list[dict], want: dict) -> float:
    """10^-6 of the span, plus what float64 rounding may cost a correct implementation at the
    size of these timestamps (a100_simple_add's clock reads 1.7e15 us, the DDP trace's 4.5e12):
    HTA's own formula, the sum of the merged ends minus the sum of their starts, is off by about
    24 us on the whole DDP trace, where the merged lengths added up are exact to 1 ns each."""
    gpu = _gpu_events(events)
    largest = max((abs(float(e["ts"])) + abs(float(e["dur"])) for e in gpu), default=1.0)
    return 1e-6 * max(want["span_us"], 1.0) + 16 * len(gpu) * math.ulp(largest)


def _with(events: list[dict], change) -> list[dict]:
    """The events with ``change(event)`` applied to copies (None drops an event)."""
    out = []
    for e in events:
        changed = change(_copy_event(e))
        if changed is not None:
            out.append(changed)
    return out


def _recategorized(cats: set, to: str):
    def change(e: dict) -> dict:
        if e.get("ph") == "X" and e.get("cat") in cats:
            e["cat"], e["name"] = to, f"as {to}: {e.get('name', '')}".replace("nccl", "n-c-c-l")
        return e

    return change


def _streams_as(to: str):
    """Every complete event that carries ``args.stream`` taken as GPU work (``to``)."""

    def change(e: dict) -> dict:
        has_stream = isinstance(e.get("args"), dict) and "stream" in e["args"]
        if e.get("ph") == "X" and has_stream and e.get("cat") not in BREAKDOWN_GPU_CATS:
            e["cat"] = to
        return e

    return change


def _nccl_renamed(e: dict) -> dict:
    if e.get("cat") == "kernel" and "nccl" in str(e.get("name", "")).lower():
        e["name"] = "a communication kernel, renamed"
    return e


#: The mistakes a wrong breakdown is tested against: (what the events become, the cause).
#: Each is the reference applied to the events as the mistake sees them.
_BREAKDOWN_MISTAKES = [
    (
        _nccl_renamed,
        "NCCL kernels counted as compute: a kernel whose name contains 'nccl' (any case) is "
        "communication; compute_us is the union of the other kernels only",
    ),
    (
        lambda e: None if e.get("cat") in ("gpu_memcpy", "gpu_memset") else e,
        "copies and memsets left out: gpu_memcpy and gpu_memset events are GPU events too (they "
        "count in the span and in busy_us), only not compute",
    ),
    (
        lambda e: None if e.get("cat") == "gpu_memcpy" else e,
        "copies left out: gpu_memcpy events are GPU events (span, busy_us), only not compute",
    ),
    (
        lambda e: None if e.get("cat") == "gpu_memset" else e,
        "memsets left out: gpu_memset events are GPU events (span, busy_us), only not compute",
    ),
    (
        _recategorized({"gpu_memcpy", "gpu_memset"}, "kernel"),
        "copies or memsets counted as compute: compute_us is the union of the compute "
        "kernels alone (category kernel, no 'nccl' in the name)",
    ),
    (
        _streams_as("gpu_memset"),
        "events selected by their args.stream: cuda_sync records (Stream Sync, Context "
        "Sync: the host waiting) carry a stream too, and so do the ROCm trace's runtime calls. "
        "Select the GPU events by category: kernel, gpu_memcpy, gpu_memset",
    ),
    (
        _streams_as("kernel"),
        "events selected by their args.stream: cuda_sync records (Stream Sync, Context "
        "Sync: the host waiting) carry a stream too, and so do the ROCm trace's runtime calls. "
        "Select the GPU events by category: kernel, gpu_memcpy, gpu_memset",
    ),
    (
        _recategorized({"gpu_user_annotation"}, "gpu_memset"),
        "gpu_user_annotation events counted: they are record_function ranges drawn on the GPU's "
        "rows and span the gaps between kernels; the GPU events are the categories kernel, "
        "gpu_memcpy and gpu_memset",
    ),
    (
        _recategorized({"gpu_user_annotation"}, "kernel"),
        "gpu_user_annotation events counted: they are record_function ranges drawn on the GPU's "
        "rows and span the gaps between kernels; the GPU events are the categories kernel, "
        "gpu_memcpy and gpu_memset",
    ),
]


def _breakdown_cause(got: dict, want: dict, events: list[dict], tol: float, hint: str) -> str:
    """The likely cause of a wrong breakdown: the first known mistake that gives the student's
    numbers, else what the case tests."""

    def near(a: float, b: float) -> bool:
        return abs(a - b) <= tol

    off = [k for k in BREAKDOWN_KEYS if not near(got[k], want[k])]
    gpu = _gpu_events(events)
    summed = sum(float(e["dur"]) for e in gpu)
    summed_compute = sum(
        float(e["dur"])
        for e in gpu
        if e["cat"] == "kernel" and "nccl" not in str(e.get("name", "")).lower()
    )
    union = (
        "merge the intervals (sort by start; a run goes on while the next interval starts "
        "before the run's end, and ends at the largest end seen) and add the merged lengths"
    )
    if gpu and "span_us" in off:
        in_list_order = float(gpu[-1]["ts"]) + float(gpu[-1]["dur"]) - float(gpu[0]["ts"])
        if near(got["span_us"], in_list_order):
            return (
                "the span taken from the first and last GPU events in list order: events come "
                "in any order (a Kineto file writes each thread and stream in turn); take the "
                "smallest start and the largest end, and sort the intervals before merging"
            )
    if got["busy_us"] > got["span_us"] + tol or ("busy_us" in off and near(got["busy_us"], summed)):
        return (
            "busy_us is the sum of the GPU events' durations: events that overlap (two streams "
            "at once) count twice, and busy can exceed the span. Take the union: " + union
        )
    if "compute_us" in off and near(got["compute_us"], summed_compute):
        return "compute_us is the sum of the compute kernels' durations, not their union: " + union
    ref = reference(ASSIGNMENT).temporal_breakdown
    for change, cause in _BREAKDOWN_MISTAKES:
        seen = _with(events, change)
        if seen == events:
            continue
        try:
            mistaken = ref(seen)
        except ValueError:
            continue
        if all(near(got[k], mistaken[k]) for k in off):
            return cause
    timed = [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]
    if "span_us" in off and timed:
        everything = max(float(e["ts"]) + float(e["dur"]) for e in timed) - min(
            float(e["ts"]) for e in timed
        )
        if near(got["span_us"], everything):
            return (
                "the span covers host events (cpu_op, cuda_runtime...): it runs from the first "
                "GPU event's start to the last GPU event's end"
            )
    if not near(got["idle_us"], got["span_us"] - got["busy_us"]) or not near(
        got["non_compute_us"], got["busy_us"] - got["compute_us"]
    ):
        return "idle_us must be span_us - busy_us, and non_compute_us busy_us - compute_us"
    return hint or (
        "the GPU events are the complete events of category kernel, gpu_memcpy and gpu_memset; "
        "busy and compute are lengths of unions of intervals: " + union
    )


def _shown(value: dict) -> dict:
    return {k: round(float(value[k]), 3) for k in BREAKDOWN_KEYS if k in value}


def _judge_breakdowns(cases: list, records: list) -> int:
    """Compare each recorded result with the reference on the same events; return how many
    cases were compared.

    Raises:
        CheckFailed: a value off, a result that is not a dict of the five numbers, or no
            ValueError for events without a GPU event.
    """
    ref = reference(ASSIGNMENT).temporal_breakdown
    for case, record in zip(cases, records):
        events = breakdown_case_events(case, fresh=False)
        label = _case_label(case)
        call = f"temporal_breakdown(<events of {label}>)"
        try:
            want = ref(events)
        except ValueError:
            want = None
        if want is None:
            expect_raises(
                ValueError,
                outcome,
                record,
                what=f"{call}: the events hold no GPU event, so this must raise ValueError",
                cause="with no kernel, gpu_memcpy or gpu_memset event there is no span: raise "
                "ValueError saying so (cuda_sync and gpu_user_annotation events are not GPU "
                "events)",
            )
            continue
        got = call_student(outcome, record, name=call)
        require(
            isinstance(got, dict)
            and all(
                isinstance(got.get(k), (int, float)) and not isinstance(got.get(k), bool)
                for k in BREAKDOWN_KEYS
            ),
            f"{call} must return a dict of the five numbers",
            yours=got,
            expected=_shown(want),
            cause=f"return a dict with the keys {list(BREAKDOWN_KEYS)}, floats in microseconds",
        )
        tol = _tolerance(events, want)
        off = [k for k in BREAKDOWN_KEYS if abs(got[k] - want[k]) > tol]
        if off:
            fail(
                f"{call}: {', '.join(off)} off (within {tol:.3g} us)",
                yours=_shown(got),
                expected=_shown(want),
                cause=_breakdown_cause(got, want, events, tol, _case_hint(case)),
            )
    return len(cases)


def _visible_breakdown_cases() -> list[tuple]:
    return [
        ("events", "the worked example of the exercise", WORKED_EXAMPLE, ""),
        ("trace", VISIBLE_TRACE),
    ]


def check_temporal_breakdown(temporal_breakdown) -> None:
    """Compare span, busy, idle, compute and non-compute time with the reference on the
    exercise's worked example and on the real A100 trace ``a100_simple_add``.

    Raises:
        CheckFailed: a value off (the message names the likely mistake), or not a dict of the
            five numbers.
    """
    fn = student(temporal_breakdown, "temporal_breakdown")
    cases = _visible_breakdown_cases()
    records = call_student(fn.probe, _probe_breakdowns, cases, name="temporal_breakdown(...)")
    _judge_breakdowns(cases, records)
    b = reference(ASSIGNMENT).temporal_breakdown(raw_trace_events(VISIBLE_TRACE))
    passed(
        f"temporal_breakdown matches the reference on the worked example and on {VISIBLE_TRACE} "
        f"(A100: span {b['span_us'] / 1e6:.2f} s, GPU busy {b['busy_us'] / b['span_us']:.1%} of "
        "it)"
    )


def _edge_cases() -> list[tuple]:
    """Small cases cut from real events, each with what it tests (the fallback cause)."""
    cases = []
    multi = list(_shipped_events("a100_event_sync_multi_stream"))
    cases.append(
        (
            "events",
            "a100_event_sync_multi_stream, its events in reverse order",
            multi[::-1],
            "events come in any order: sort the intervals by start before merging, and take "
            "the span from the smallest start to the largest end",
        )
    )
    alexnet = list(_shipped_events("a100_alexnet"))
    shuffled = [e for e in alexnet if e.get("ph") == "X"]
    random.Random(0).shuffle(shuffled)
    cases.append(
        (
            "events",
            "a100_alexnet's complete events, shuffled",
            shuffled,
            "events come in any order: sort the intervals by start before merging, and take "
            "the span from the smallest start to the largest end",
        )
    )
    # an all-reduce on stream 40 partly under compute kernels on stream 7, with what ran near it
    ddp = list(_shipped_events(DDP_TRACE))
    gpu = sorted(_gpu_events(ddp), key=lambda e: e["ts"])
    compute = [e for e in gpu if e["cat"] == "kernel" and "nccl" not in e["name"].lower()]
    (nccl, *_) = [
        k
        for k in gpu
        if "AllReduce" in k["name"]
        and any(c["ts"] < k["ts"] + k["dur"] and k["ts"] < c["ts"] + c["dur"] for c in compute)
    ]
    start, end = nccl["ts"] - 20.0, nccl["ts"] + nccl["dur"] + 20.0
    around = (
        "events",
        f"{DDP_TRACE} from 20 us before to 20 us after its first all-reduce that overlaps "
        "compute (streams 7 and 40)",
        [
            e
            for e in ddp
            if e.get("ph") == "X" and "dur" in e and e["ts"] < end and start < e["ts"] + e["dur"]
        ],
        "two streams at once count once in busy_us, and the all-reduce's time under a "
        "compute kernel is compute time: only its time alone is non-compute",
    )
    # a kernel inside the interval of another (on another stream), then one more
    simple = list(_shipped_events(VISIBLE_TRACE))
    kernels = [e for e in simple if e.get("ph") == "X" and e.get("cat") == "kernel"]
    longest = max(kernels, key=lambda e: e["dur"])
    inner, after = (_copy_event(k) for k in kernels[:2])
    inner.update(ts=longest["ts"] + longest["dur"] / 4, dur=longest["dur"] / 4)
    inner["args"]["stream"] = longest["args"]["stream"] + 1
    after.update(ts=longest["ts"] + longest["dur"] + 5)
    host = [e for e in simple if e.get("ph") == "X" and e.get("cat") == "cpu_op"][:3]
    cases.append(
        (
            "events",
            "a long kernel of a100_simple_add with another inside its interval (another stream), "
            "then a third",
            [*host, longest, inner, after],
            "an interval inside another must not end the run early: a merged run ends at the "
            "largest end seen so far (max), not at the last interval's end",
        )
    )
    copies = [e for e in simple if e.get("cat") in ("gpu_memcpy", "gpu_memset", "cpu_op")]
    cases.append(
        (
            "events",
            "the copies, memsets and host operators of a100_simple_add (no kernel)",
            copies,
            "copies and memsets are GPU events (span, busy) but not compute: compute_us is 0 "
            "and non_compute_us equals busy_us",
        )
    )
    (memset, *_) = [e for e in alexnet if e.get("cat") == "gpu_memset"]
    cases.append(
        (
            "events",
            "one memset of a100_alexnet and the host operators around it",
            [e for e in alexnet if e.get("cat") == "cpu_op"][:5] + [memset],
            "one GPU event: span and busy are its duration, and a memset is not compute",
        )
    )
    sync = list(_shipped_events("a100_event_sync"))
    sync_gpu = _gpu_events(sync)
    last = max(e["ts"] + e["dur"] for e in sync_gpu)
    late, gap = _copy_event(sync_gpu[0]), _copy_event(sync_gpu[0])
    late.update(ts=last + 100, dur=0)
    gap.update(ts=last + 50, dur=0)
    cases.append(
        (
            "events",
            "a100_event_sync with two zero-duration kernels after its last GPU event (50 and "
            "100 us later)",
            [*sync, gap, late],
            "zero-duration events count: one after the last GPU event extends the span to its "
            "timestamp, and adds nothing to busy_us",
        )
    )
    cases.append(around)
    cases.append(
        (
            "events",
            "the host events, cuda_sync records and GPU annotations of a100_event_sync and "
            f"{DDP_TRACE} (no GPU event)",
            [e for e in sync if e.get("cat") not in BREAKDOWN_GPU_CATS]
            + [e for e in ddp if e.get("cat") == "gpu_user_annotation"],
            "",
        )
    )
    cases.append(
        (
            "events",
            "a copy and an all-reduce, no compute kernel (small timestamps)",
            [
                _x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 4.0, 6.0, 40),
                _x("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 0.0, 5.0, 7),
            ],
            "with no compute kernel compute_us is 0: the union of no intervals is empty",
        )
    )
    cases.append(("events", "an empty list of events", [], ""))
    return cases


def _hidden_breakdown_cases() -> list[tuple]:
    traces = [("trace", name) for name in real_trace_names() if name != VISIBLE_TRACE]
    steps = [("step", DDP_TRACE, step) for step in DDP_STEPS]
    # the small cases first: a mistake fails where its case's hint names it
    return _edge_cases() + traces + steps


def check_temporal_breakdown_hidden(temporal_breakdown) -> None:
    """Compare with the reference on every shipped real trace (A100s, the DDP rank with its
    NCCL kernels, the Triton one, the MI250's), each profiler step of the DDP trace, and edge
    cases cut from real events; events without a GPU event must raise ValueError.

    Raises:
        CheckFailed: a value off (the message names the likely mistake), not a dict of the
            five numbers, or no ValueError without GPU events.
    """
    fn = student(temporal_breakdown, "temporal_breakdown")
    cases = _hidden_breakdown_cases()
    records = call_student(fn.probe, _probe_breakdowns, cases, name="temporal_breakdown(...)")
    n = _judge_breakdowns(cases, records)
    passed(
        f"temporal_breakdown matches the reference on {n} cases: every shipped real trace, the "
        "DDP trace's profiler steps, edge cases, and raises ValueError without GPU events"
    )


# --------------------------------------------------------------------------- plots
def plot_roofline(ax, points: dict, dtype_key: str = "bf16", gpus=None) -> None:
    """Draw the rooflines of ``gpus`` (default: all of :data:`GPUS`) on a log-log axis, with
    ``points`` (name -> FLOP/byte) marked on the lowest roofline (the slowest memory and the
    lowest peak of those GPUs).

    Args:
        ax: A matplotlib ``Axes``.
        points: Op name -> arithmetic intensity, FLOP/byte.
        dtype_key: Which peak to use ("bf16", "fp16", "fp32"); a GPU without it (the T4 has
            no bf16) is drawn with its fp16 peak, and its legend entry says so.
        gpus: Keys of :data:`GPUS` to draw.
    """
    import numpy as np

    intensities = np.logspace(-2, 4, 200)
    for key in gpus or GPUS:
        spec = GPUS[key]
        tflops = spec.tflops.get(dtype_key) or spec.tflops["fp16"]
        label = key if spec.tflops.get(dtype_key) else f"{key} (fp16: no {dtype_key})"
        roof = np.minimum(tflops, intensities * spec.memory_gb_s / 1e3)
        (line,) = ax.loglog(
            intensities, roof, label=f"{label}: ridge {tflops * 1e3 / spec.memory_gb_s:.0f}"
        )
        ax.axvline(tflops * 1e3 / spec.memory_gb_s, color=line.get_color(), linestyle=":", lw=0.8)
    lowest = min(GPUS[k].tflops.get(dtype_key) or GPUS[k].tflops["fp16"] for k in gpus or GPUS)
    slowest = min(GPUS[k].memory_gb_s for k in gpus or GPUS) / 1e3
    for i, (name, intensity) in enumerate(sorted(points.items(), key=lambda item: item[1])):
        y = min(lowest, intensity * slowest)
        ax.plot([intensity], [y], "o", color="black", ms=4)
        ax.annotate(name, (intensity, y), textcoords="offset points", fontsize=7,
                    xytext=(4, -11 if i % 2 == 0 else 5))  # fmt: skip
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel(f"attainable TFLOP/s ({dtype_key}, dense)")
    ax.legend(fontsize=7, loc="upper left")
