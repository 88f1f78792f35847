"""Checks for 06_amp: AUTOCAST_DTYPES, amp_train_step, train_amp (with its validation pass).

Autocast and the grad scaler work on the CPU too (``torch.autocast("cpu", ...)`` and
``torch.amp.GradScaler("cpu")``), so every exercise is checked on the CPU on every
machine; the ``_cuda`` checks repeat them on a GPU against the reference, where the
float16 kernels and the CUDA autocast policy differ from the CPU's.

The checks reach the student's code through a :class:`~grader.runtime.remote.Handle`. The ``_probe_*``
functions run where the student's code lives (under autograde, in their kernel): they build the
model, optimizer, grad scaler and data with the seeded builders of this module, call the
student's function and hand back plain data (losses, state_dict tensors, the scale, what each
forward pass saw). The recipe the steps are compared with, the reference and every comparison
run here, on the grading side; what autocast does is observed here too, in the grading process.
"""

from __future__ import annotations

import contextlib
import io
import math
import re
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from grader.checks.common import call_student, cuda_or_not_checked, not_attempted, passed, require
from grader.runtime.course import reference
from grader.runtime.remote import Recorded, attempt, student

ASSIGNMENT = "06_amp"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True


def _replay(name: str, record: dict, label: str):
    """The value of one recorded call of the student's function (or its failure)."""
    return call_student(Recorded(name, [((), {})], [record]), name=label)


# --------------------------------------------------------------------------- autocast_dtypes
def autocast_operands(device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """The operands every case of :data:`AUTOCAST_CASES` is computed on (seeded, so the same
    each call).

    Args:
        device: Where to put them (``"cpu"``, ``"cuda"``, ...).

    Returns:
        ``x`` float32 (4, 8); ``w`` float32 (8, 8); ``images`` float32 (1, 3, 8, 8);
        ``kernel`` float32 (4, 3, 3, 3); ``target`` float32 (4, 8); ``labels`` int64 (4,),
        class indices in [0, 8).
    """
    g = torch.Generator().manual_seed(0)
    t = {
        "x": torch.randn(4, 8, generator=g),
        "w": torch.randn(8, 8, generator=g),
        "images": torch.randn(1, 3, 8, 8, generator=g),
        "kernel": torch.randn(4, 3, 3, 3, generator=g),
        "target": torch.randn(4, 8, generator=g),
        "labels": torch.randint(0, 8, (4,), generator=g),
    }
    return {k: v.to(device) for k, v in t.items()}


#: The ops of the exercise: name -> (what is computed, function of the operands). Every
#: input is float32; "of_linear" ops get the output of ``F.linear(x, w)`` under autocast.
AUTOCAST_CASES: dict[str, tuple[str, Callable[[dict], torch.Tensor]]] = {
    "matmul": ("x @ w", lambda t: t["x"] @ t["w"]),
    "conv2d": ("F.conv2d(images, kernel)", lambda t: F.conv2d(t["images"], t["kernel"])),
    "relu": ("F.relu(x)", lambda t: F.relu(t["x"])),
    "relu_of_linear": ("F.relu(F.linear(x, w))", lambda t: F.relu(F.linear(t["x"], t["w"]))),
    "linear_plus_input": ("F.linear(x, w) + x", lambda t: F.linear(t["x"], t["w"]) + t["x"]),
    "softmax_of_linear": (
        "F.softmax(F.linear(x, w), dim=-1)",
        lambda t: F.softmax(F.linear(t["x"], t["w"]), dim=-1),
    ),
    "sum_of_linear": ("F.linear(x, w).sum()", lambda t: F.linear(t["x"], t["w"]).sum()),
    "layer_norm_of_linear": (
        "F.layer_norm(F.linear(x, w), (8,))",
        lambda t: F.layer_norm(F.linear(t["x"], t["w"]), (8,)),
    ),
    "mse_loss_of_linear": (
        "F.mse_loss(F.linear(x, w), target)",
        lambda t: F.mse_loss(F.linear(t["x"], t["w"]), t["target"]),
    ),
    "cross_entropy_of_linear": (
        "F.cross_entropy(F.linear(x, w), labels)",
        lambda t: F.cross_entropy(F.linear(t["x"], t["w"]), t["labels"]),
    ),
}

#: What the documented CUDA policy gives for each case under float16 autocast. Source:
#: PyTorch docs, "Automatic Mixed Precision package - torch.amp", Autocast Op Reference:
#: "CUDA Ops that can autocast to float16" (matmul, conv2d, linear) and "CUDA Ops that
#: can autocast to float32" (softmax, sum, layer_norm, mse_loss, cross_entropy); ops in
#: neither list (relu, +) run in the dtype of their inputs, promoted to the widest.
DOCUMENTED_CUDA_FLOAT16 = {
    "matmul": torch.float16,
    "conv2d": torch.float16,
    "relu": torch.float32,
    "relu_of_linear": torch.float16,
    "linear_plus_input": torch.float32,
    "softmax_of_linear": torch.float32,
    "sum_of_linear": torch.float32,
    "layer_norm_of_linear": torch.float32,
    "mse_loss_of_linear": torch.float32,
    "cross_entropy_of_linear": torch.float32,
}


def observed_autocast_dtypes(device_type: str, dtype: torch.dtype = torch.float16) -> dict:
    """Run every case of :data:`AUTOCAST_CASES` under ``torch.autocast(device_type, dtype)``
    (in this process: the checks call it on the grading side).

    Args:
        device_type: ``"cpu"`` or ``"cuda"``.
        dtype: The autocast dtype, ``torch.float16`` or ``torch.bfloat16``.

    Returns:
        Case name -> the dtype of its output on this machine.
    """
    device = "cuda:0" if device_type == "cuda" else "cpu"
    operands = autocast_operands(device)
    with torch.autocast(device_type, dtype=dtype):
        return {name: fn(operands).dtype for name, (_, fn) in AUTOCAST_CASES.items()}


def _why(name: str, expected: torch.dtype, device_type: str) -> str:
    if expected == torch.float32 and name in ("relu", "linear_plus_input"):
        return (
            "autocast changes only ops on its lists; others keep their inputs' dtype, and mixing "
            "float16 with float32 promotes to float32"
        )
    if expected == torch.float32:
        return (
            "softmax, sum, layer_norm and losses are on CUDA's float32 list; the CPU's float32 "
            "list has the losses but not softmax, sum or layer_norm"
        )
    if name in ("matmul", "conv2d"):
        return "matmul/conv/linear are on the lower-precision list on every device"
    if device_type == "cpu":
        return (
            "the CPU's float32 list (long: losses, linear algebra, FFTs, some pooling) has no "
            "softmax, sum or layer_norm: they keep their float16 input's dtype (CUDA's differs)"
        )
    return "an op off autocast's lists keeps the dtype of its (float16) input"


def _answers(autocast_dtypes) -> dict:
    """The student's AUTOCAST_DTYPES as data (grading side), with one ``torch.dtype`` for every
    ``cpu/`` and ``cuda/`` case.

    Raises:
        CheckFailed: not a dict, an entry is missing, or an entry is not a ``torch.dtype``.
    """
    got = call_student(autocast_dtypes.value, name="reading AUTOCAST_DTYPES")
    require(
        isinstance(got, dict),
        "AUTOCAST_DTYPES must be a dict",
        yours=type(got).__name__,
        expected="dict[str, torch.dtype]",
        cause='write {"cpu/matmul": torch.float16, ..., "cuda/matmul": ..., ...}',
    )
    if got and all(v is None for v in got.values()):
        raise not_attempted("AUTOCAST_DTYPES")
    keys = [f"{d}/{name}" for d in ("cpu", "cuda") for name in AUTOCAST_CASES]
    missing = [k for k in keys if k not in got]
    require(
        not missing,
        "AUTOCAST_DTYPES lacks entries",
        yours=missing,
        expected=keys,
        cause="one entry per case of AUTOCAST_CASES, for both 'cpu/...' and 'cuda/...'",
    )
    for key in keys:
        value = got[key]
        if isinstance(value, str):
            cause = (
                f"a string is not a dtype: write torch.{value.removeprefix('torch.')} "
                f"without quotes, not {value!r}"
            )
        elif value is None:
            cause = "this entry is still None: replace it with torch.float16 or torch.float32"
        else:
            cause = "each entry is a torch.dtype: torch.float16 or torch.float32"
        require(
            isinstance(value, torch.dtype),
            f"AUTOCAST_DTYPES[{key!r}] must be a torch.dtype",
            yours=value,
            expected="torch.float16 or torch.float32",
            cause=cause,
        )
    return got


def _check_entries(autocast_dtypes: dict, device_type: str, expected: dict, source: str) -> None:
    for name in AUTOCAST_CASES:
        key = f"{device_type}/{name}"
        got = autocast_dtypes[key]
        require(
            got == expected[name],
            f"AUTOCAST_DTYPES[{key!r}]: dtype of {AUTOCAST_CASES[name][0]} under "
            f"torch.autocast({device_type!r}, dtype=torch.float16) ({source})",
            yours=got,
            expected=expected[name],
            cause=_why(name, expected[name], device_type),
        )


def check_autocast_dtypes(autocast_dtypes) -> None:
    """Check that every entry is a ``torch.dtype``, the ``cpu/`` predictions against what CPU
    autocast does on this machine (observed in the grading process) and the ``cuda/`` ones
    against the documented CUDA policy (:data:`DOCUMENTED_CUDA_FLOAT16`; the hidden and the
    ``_cuda`` checks compare them with a GPU when there is one).

    Raises:
        CheckFailed: an entry is missing, not a dtype, or differs.
    """
    answers = _answers(student(autocast_dtypes, "AUTOCAST_DTYPES"))
    _check_entries(answers, "cpu", observed_autocast_dtypes("cpu"), "observed on this machine")
    _check_entries(answers, "cuda", DOCUMENTED_CUDA_FLOAT16, "the documented CUDA policy")
    passed(
        "every cpu/ prediction matches what torch.autocast('cpu', torch.float16) does, and every "
        "cuda/ one the documented CUDA policy"
    )


def check_autocast_dtypes_hidden(autocast_dtypes) -> None:
    """Compare the ``cuda/`` predictions with the GPU when there is one, else with the
    documented CUDA policy (the ``_cuda`` cell then checks them on a GPU)."""
    answers = _answers(student(autocast_dtypes, "AUTOCAST_DTYPES"))
    if torch.cuda.is_available():
        expected, source = observed_autocast_dtypes("cuda"), "observed on this GPU"
    else:
        expected, source = DOCUMENTED_CUDA_FLOAT16, "the documented CUDA policy"
    _check_entries(answers, "cuda", expected, source)
    passed("every cuda/ prediction matches the CUDA autocast policy")


def check_autocast_dtypes_cuda(autocast_dtypes) -> None:
    """On a GPU: compare the ``cuda/`` predictions with what CUDA autocast does."""
    if not cuda_or_not_checked("AUTOCAST_DTYPES against CUDA autocast"):
        return
    answers = _answers(student(autocast_dtypes, "AUTOCAST_DTYPES"))
    _check_entries(answers, "cuda", observed_autocast_dtypes("cuda"), "observed on this GPU")
    passed("every cuda/ prediction matches what this GPU's autocast does")


# --------------------------------------------------------------------------- amp_train_step
def _mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)
    )


def _batches(n: int, seed: int, device: str = "cpu") -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(32, 16, generator=g).to(device), torch.randn(32, 4, generator=g).to(device))
        for _ in range(n)
    ]


def _inf_loss(out, target):
    """A loss whose gradients are all infinite: the step must be skipped."""
    return F.mse_loss(out, target) * math.inf


_LOSSES = {"mse": F.mse_loss, "inf": _inf_loss}


def _state(model: nn.Module) -> dict:
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def _run_steps(
    step_fn,
    *,
    device: str = "cpu",
    dtype: torch.dtype = torch.float16,
    max_grad_norm: float | None = None,
    loss: str = "mse",
    steps: int = 4,
    momentum: float = 0.0,
    init_scale: float = 2.0**12,
    growth_interval: int = 2,
    seed: int = 0,
) -> dict:
    """Train a fresh MLP for ``steps`` steps with ``step_fn``; stop at the first failing step.

    Runs in a probe for the student's step and on the grading side for the recipe and the
    reference. Returns plain data: ``records`` (one :func:`~grader.runtime.remote.attempt` record per
    step: the returned loss), the model's ``state`` (state_dict tensors on the CPU) and the
    scaler's ``scale``.
    """
    model = _mlp(seed).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum)
    device_type = torch.device(device).type
    scaler = torch.amp.GradScaler(
        device_type,
        init_scale=init_scale,
        growth_interval=growth_interval,
        enabled=dtype == torch.float16,
    )
    records = []
    for x, y in _batches(steps, seed + 1, device):
        record = attempt(
            step_fn,
            model,
            x,
            y,
            _LOSSES[loss],
            optimizer,
            scaler,
            device_type=device_type,
            dtype=dtype,
            max_grad_norm=max_grad_norm,
        )
        records.append(record)
        if not record["ok"]:
            break
    return {"records": records, "state": _state(model), "scale": float(scaler.get_scale())}


def _probe_amp_steps(amp_train_step, spec: dict) -> dict:
    """Probe: :func:`_run_steps` with the student's step function."""
    return _run_steps(amp_train_step, **spec)


def _recipe_step(model, x, y, loss_fn, optimizer, scaler, *, device_type, dtype, max_grad_norm):
    """The specification of amp_train_step, written out (grading side only)."""
    optimizer.zero_grad()
    with torch.autocast(device_type, dtype=dtype):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    if max_grad_norm is not None:
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.detach()


_STEP_CAUSES = (
    "check, in order: optimizer.zero_grad() first; forward and loss inside torch.autocast; "
    "scaler.scale(loss).backward() outside it (not loss.backward()); scaler.step(optimizer); "
    "scaler.update()"
)


#: A grad scaler held at scale 1 (it starts there and would grow only after 1000 steps). A step
#: that does not zero the gradients adds them to the previous step's, which ``scaler.step`` left
#: unscaled: at scale S the next unscale divides those leftovers by S again, so with the usual
#: scales (4096 and up) they move the parameters by about 1e-6, within every tolerance here; at
#: scale 1 they count in full (about 3e-2 after 4 steps, float16 on the CPU).
_SCALE_ONE = {"init_scale": 1.0, "growth_interval": 1000, "seed": 6}
_ZERO_GRAD_CAUSE = (
    "call optimizer.zero_grad() at the start of every step: otherwise backward adds this step's "
    "gradients to the previous step's (a large scale hides it: unscaling divides the leftovers "
    "by the scale again)"
)


def _max_state_diff(a: dict, b: dict) -> float:
    return max((a[k].float() - b[k].float()).abs().max().item() for k in b)


def _student_steps(amp_train_step, spec: dict) -> dict:
    """Run the steps in the student's process; every step's failure becomes a check failure."""
    seen = amp_train_step.probe(_probe_amp_steps, spec)
    for i, record in enumerate(seen["records"]):
        _replay("amp_train_step", record, f"amp_train_step (step {i + 1}, {spec})")
    return seen


def _compare_run(amp_train_step, what: str, cause: str, tol: float = 1e-5, **spec) -> None:
    seen = _student_steps(amp_train_step, spec)
    expected = _run_steps(_recipe_step, **spec)
    diff = _max_state_diff(seen["state"], expected["state"])
    steps = spec.get("steps", 4)
    require(
        diff <= tol,
        f"parameters after {steps} steps ({what}): largest difference from the expected",
        yours=f"{diff:.3g}",
        expected=f"<= {tol:g}",
        cause=cause,
    )
    require(
        seen["scale"] == expected["scale"],
        f"scaler.get_scale() after {steps} steps ({what})",
        yours=seen["scale"],
        expected=expected["scale"],
        cause="call scaler.update() once at the end of every step",
    )


def _check_returned_loss(loss, expected: torch.Tensor) -> None:
    require(
        isinstance(loss, torch.Tensor) and loss.dim() == 0,
        "amp_train_step must return the loss as a 0-dim tensor",
        yours=loss
        if not isinstance(loss, torch.Tensor)
        else f"tensor of shape {tuple(loss.shape)}",
        expected="a 0-dim tensor",
        cause="return loss.detach()",
    )
    require(
        not loss.requires_grad,
        "the returned loss must be detached from the autograd graph",
        yours="requires_grad=True (it keeps the step's whole graph alive)",
        expected="requires_grad=False",
        cause="return loss.detach()",
    )
    require(
        torch.allclose(loss.float().cpu(), expected.float(), rtol=1e-3, atol=1e-5),
        "the returned loss (before the update)",
        yours=loss.item(),
        expected=expected.item(),
        cause="return the unscaled loss computed in this step, not the scaled one",
    )


def check_amp_train_step(amp_train_step) -> None:
    """Check on the CPU with float16 autocast and an enabled GradScaler: the returned
    loss, parameters and scale after several steps, clipping, a skipped step, and steps with
    the scaler held at scale 1 (where gradients that were never zeroed show).

    Raises:
        CheckFailed: a step differs from zero_grad / autocast forward / scaled backward /
            unscale_ then clip / scaler.step / scaler.update.
    """
    amp_train_step = student(amp_train_step, "amp_train_step")
    first = _student_steps(amp_train_step, {"steps": 1})
    with torch.autocast("cpu", dtype=torch.float16):
        x, y = _batches(1, 1)[0]
        expected_loss = F.mse_loss(_mlp(0)(x), y)
    _check_returned_loss(first["records"][0]["value"], expected_loss)

    _compare_run(amp_train_step, "float16, GradScaler", _STEP_CAUSES, steps=4)
    _compare_run(
        amp_train_step,
        "float16, GradScaler, max_grad_norm=0.05",
        "call scaler.unscale_(optimizer) before clip_grad_norm_: clipping the scaled gradients "
        "clips them to max_grad_norm * scale",
        steps=3,
        max_grad_norm=0.05,
    )

    # A step whose loss is infinite: the gradients are inf/NaN, so scaler.step must skip
    # optimizer.step() and scaler.update() must halve the scale.
    seen = _student_steps(amp_train_step, {"steps": 1, "loss": "inf", "growth_interval": 2000})
    diff = _max_state_diff(seen["state"], _state(_mlp(0)))
    require(
        diff == 0.0,
        "after a step with infinite gradients the parameters must be unchanged (step skipped)",
        yours=f"changed by up to {diff:.3g}",
        expected="unchanged",
        cause="call scaler.step(optimizer), not optimizer.step(): it skips the step on inf/NaN",
    )
    require(
        seen["scale"] == 2.0**11,
        "scale after a step with infinite gradients (init_scale 4096, backoff_factor 0.5)",
        yours=seen["scale"],
        expected=2.0**11,
        cause="call scaler.update() after scaler.step(): it lowers the scale after an overflow",
    )
    _compare_run(
        amp_train_step,
        "float16, GradScaler held at scale 1",
        _ZERO_GRAD_CAUSE,
        steps=4,
        **_SCALE_ONE,
    )
    passed("amp_train_step trains like the recipe, clips unscaled gradients and skips inf steps")


def _compare_with_reference(amp_train_step, spec: dict, tol: float, where: str) -> None:
    seen = _student_steps(amp_train_step, spec)
    expected = _run_steps(reference(ASSIGNMENT).amp_train_step, **spec)
    diff = _max_state_diff(seen["state"], expected["state"])
    require(
        diff <= tol and seen["scale"] == expected["scale"],
        f"{where}parameters and scale after training with {spec}",
        yours=f"parameter difference {diff:.3g}, scale {seen['scale']}",
        expected=f"difference <= {tol:g}, scale {expected['scale']}",
        cause=_STEP_CAUSES,
    )


def check_amp_train_step_hidden(amp_train_step) -> None:
    """Compare with the reference: momentum, bfloat16 (scaler disabled), clipping."""
    amp_train_step = student(amp_train_step, "amp_train_step")
    for spec in (
        {"momentum": 0.9, "steps": 5, "seed": 3},
        {"dtype": torch.bfloat16, "steps": 4, "seed": 4},
        {"max_grad_norm": 0.5, "momentum": 0.9, "steps": 4, "seed": 5, "growth_interval": 1},
    ):
        _compare_with_reference(amp_train_step, spec, 1e-5, "")
    passed("amp_train_step agrees with the reference")


def check_amp_train_step_cuda(amp_train_step) -> None:
    """On a GPU: float16 with the scaler, with clipping, and with the scaler held at scale 1
    (where gradients left from the previous step show), compared with the reference."""
    if not cuda_or_not_checked("amp_train_step with CUDA float16 autocast"):
        return
    amp_train_step = student(amp_train_step, "amp_train_step")
    for spec in (
        {"steps": 4},
        {"steps": 3, "max_grad_norm": 0.05, "momentum": 0.9},
        {"steps": 4, **_SCALE_ONE},
    ):
        _compare_with_reference(amp_train_step, {**spec, "device": "cuda:0"}, 1e-4, "CUDA ")
    passed("amp_train_step agrees with the reference on this GPU")


# --------------------------------------------------------------------------- train_amp
def _classification_data(seed: int, n: int = 256) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    true_w = torch.randn(16, 4, generator=g)
    y = (x @ true_w).argmax(dim=1)  # learnable: a linear rule
    return torch.utils.data.TensorDataset(x, y)


def _classifier(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))


#: Batch sizes of the training and validation loaders (different, so that the forward passes
#: of each can be told apart) and the validation set's size.
TRAIN_BATCH, VAL_BATCH, VAL_SIZE = 32, 20, 70  # validation: batches of 20, 20, 20 and 10


class _ForwardLog:
    """Records, for every forward pass of a model, its batch size, mode, whether autograd
    records and the autocast state; and, for every backward pass through the model's output,
    the largest gradient of the loss with respect to that output (``grads``). For a mean
    cross-entropy that gradient is at most 1 / batch size in magnitude, unless the loss was
    scaled first (a GradScaler multiplies it by its scale, 2**16 to begin with)."""

    def __init__(self, model: nn.Module, device_type: str):
        self.calls: list[dict] = []
        self.grads: list[float] = []
        self.device_type = device_type
        self.handle = model.register_forward_pre_hook(self._hook)
        self.output_handle = model.register_forward_hook(self._output_hook)

    def _output_hook(self, module, args, output):
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(self._grad_hook)

    def _grad_hook(self, grad):
        self.grads.append(float(grad.detach().abs().max()))

    def _hook(self, module, args):
        x = args[0] if args else None
        self.calls.append(
            {
                "batch": int(x.shape[0]) if isinstance(x, torch.Tensor) and x.dim() else -1,
                "training": bool(module.training),
                "grad": bool(torch.is_grad_enabled()),
                "autocast": bool(torch.is_autocast_enabled(self.device_type)),
                "autocast_dtype": torch.get_autocast_dtype(self.device_type),
            }
        )


def _train(
    train_amp,
    *,
    seed: int,
    epochs: int,
    dtype: torch.dtype,
    device: str = "cpu",
    validate: bool = False,
) -> dict:
    """Train a fresh classifier with ``train_amp`` on the fixed data set (and, with
    ``validate``, a validation loader). Runs in a probe for the student's function and on the
    grading side for the reference. Returns plain data: the call's ``record``, the model's
    ``state``, the forward passes (``calls``) and what was printed."""
    model = _classifier(seed)
    loader = torch.utils.data.DataLoader(
        _classification_data(seed), batch_size=TRAIN_BATCH, shuffle=False
    )
    kwargs = {}
    if validate:
        kwargs["val_loader"] = torch.utils.data.DataLoader(
            _classification_data(seed + 100, VAL_SIZE), batch_size=VAL_BATCH, shuffle=False
        )
    log = _ForwardLog(model, torch.device(device).type)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        record = attempt(train_amp, model, loader, epochs, 0.05, device, dtype, **kwargs)
    log.handle.remove()
    log.output_handle.remove()
    return {
        "record": record,
        "state": _state(model),
        "calls": log.calls,
        "grads": log.grads,
        "printed": printed.getvalue()[-20_000:],
    }


def _probe_train(train_amp, spec: dict) -> dict:
    """Probe: :func:`_train` with the student's train_amp."""
    return _train(train_amp, **spec)


def _require_loss_list(losses, epochs: int) -> None:
    require(
        isinstance(losses, list)
        and len(losses) == epochs
        and all(type(v) is float and math.isfinite(v) for v in losses),
        f"train_amp must return a list of {epochs} finite Python floats (mean loss per epoch)",
        yours=losses,
        expected=f"[float] * {epochs}",
        cause="append float(mean of the epoch's batch losses) once per epoch",
    )


def _student_training(train_amp, spec: dict) -> tuple[dict, list]:
    seen = train_amp.probe(_probe_train, spec)
    call = "train_amp(model, loader, epochs, lr, device, dtype" + (
        ", val_loader=val_loader)" if spec.get("validate") else ")"
    )
    losses = _replay("train_amp", seen["record"], call)
    _require_loss_list(losses, spec["epochs"])
    if spec["dtype"] == torch.bfloat16:
        largest = max(seen["grads"], default=0.0)
        require(
            largest <= 1.0,
            "bfloat16 training must not scale the loss",
            yours=f"the largest gradient of the loss with respect to the logits was {largest:.3g} "
            "(a mean cross-entropy's own gradient is at most 1 / batch size)",
            expected="unscaled gradients: a GradScaler disabled for bfloat16",
            cause="bfloat16 has float32's exponent range, so its gradients do not underflow: "
            "create the GradScaler with enabled=dtype == torch.float16",
        )
    return seen, losses


#: The reference's line per epoch (its print's format), read back for the expected values.
_REFERENCE_LINE = re.compile(r"val loss (?P<loss>[0-9.]+), val accuracy (?P<accuracy>[0-9.]+)%")
#: A number as printed: digits with an optional fraction, and a percent sign after it.
_PRINTED_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.(\d+))?)(%?)")
#: More numbers than this on one line cannot count as naming the two values.
MAX_NUMBERS_PER_LINE = 8


def _validation_figures(printed: str) -> list[tuple[float, float]]:
    """The reference's printed (validation loss, accuracy as a fraction) per epoch."""
    return [
        (float(m["loss"]), float(m["accuracy"]) / 100) for m in _REFERENCE_LINE.finditer(printed)
    ]


def _shows(line: str, value: float, *, percent_ok: bool, ref_error: float) -> bool:
    """Whether a number on ``line`` is ``value``: to within half a unit of the number's last
    printed digit plus ``ref_error`` (the rounding of the reference's own print); a number
    with ``%`` is compared as a percentage, and with ``percent_ok`` a bare number may be one."""
    for match in _PRINTED_NUMBER.finditer(line):
        number, digits = float(match[1]), 0.5 * 10.0 ** -len(match[2] or "")
        scales = [100.0] if match[3] else ([1.0, 100.0] if percent_ok else [1.0])
        if any(abs(number - value * k) <= digits + ref_error * k + 1e-9 for k in scales):
            return True
    return False


def _check_printed_validation(printed: str, expected: list[tuple[float, float]]) -> None:
    """Each epoch's validation loss and accuracy must appear, in order, on a printed line
    (any format: the accuracy as a fraction or a percentage)."""
    lines = [line for line in printed.splitlines() if _PRINTED_NUMBER.search(line)]
    found = 0
    for line in lines:
        if found == len(expected):
            break
        if len(_PRINTED_NUMBER.findall(line)) > MAX_NUMBERS_PER_LINE:
            continue
        loss, accuracy = expected[found]
        if _shows(line, loss, percent_ok=False, ref_error=5e-5) and _shows(
            line, accuracy, percent_ok=True, ref_error=5e-4
        ):
            found += 1
    loss, accuracy = expected[min(found, len(expected) - 1)]
    require(
        found == len(expected),
        "train_amp must print each epoch's validation loss and accuracy"
        + (f" (epoch {found + 1} not found)" if lines else ""),
        yours="\n".join(lines[-len(expected) :])[-400:] or "nothing printed",
        expected=f"epoch {found + 1}: val loss {loss:.4f}, val accuracy {accuracy:.1%} "
        "(the mean cross-entropy over every validation sample, and the fraction classified "
        "right), one line per epoch",
        cause="sum loss * batch size and the right predictions over the validation batches, "
        "then divide both by the number of samples: "
        "print(f'epoch {epoch + 1}: ... val loss {val_loss:.4f}, val accuracy {acc:.1%}')",
    )


def _check_validation(
    seen: dict,
    epochs: int,
    dtype: torch.dtype,
    plain: dict,
    expected_printed: list[tuple[float, float]],
) -> None:
    """The forward passes of a run with a validation loader: after each epoch's training, one
    pass over the validation set in eval mode, without autograd, under autocast with the
    training dtype; each epoch's loss and accuracy printed as ``expected_printed`` (the
    reference's, per epoch); training itself unchanged."""
    train_batches = -(-len(_classification_data(0)) // TRAIN_BATCH)
    val_batches = -(-VAL_SIZE // VAL_BATCH)
    kinds = ["train" if c["batch"] == TRAIN_BATCH else "val" for c in seen["calls"]]
    expected = (["train"] * train_batches + ["val"] * val_batches) * epochs
    require(
        kinds == expected,
        "train_amp(..., val_loader=...) must run one validation pass over val_loader after "
        "each epoch's training",
        yours=f"{kinds.count('val')} validation batches, order {''.join(k[0] for k in kinds)}",
        expected=f"{val_batches} validation batches after each epoch: "
        + "".join(k[0] for k in expected),
        cause="after the loop over loader, evaluate on every batch of val_loader; do not "
        "evaluate when val_loader is None",
    )
    val = [c for c in seen["calls"] if c["batch"] != TRAIN_BATCH]
    train = [c for c in seen["calls"] if c["batch"] == TRAIN_BATCH]
    require(
        not any(c["training"] for c in val),
        "the model must be in evaluation mode during validation",
        yours="model.training was True in a validation forward pass",
        expected="model.eval() before the validation loop",
        cause="call model.eval() before validating (dropout off, batch norm uses its running "
        "statistics) and model.train() at the start of each epoch",
    )
    require(
        all(c["training"] for c in train),
        "the model must be back in training mode for every training step",
        yours="model.training was False in a training forward pass",
        expected="model.train() at the start of each epoch",
        cause="validation leaves the model in eval mode: call model.train() before training",
    )
    require(
        not any(c["grad"] for c in val),
        "validation must not record an autograd graph",
        yours="autograd was recording during a validation forward pass",
        expected="torch.no_grad() or torch.inference_mode() around validation",
        cause="wrap the validation loop in torch.inference_mode() (or torch.no_grad())",
    )
    require(
        all(c["autocast"] and c["autocast_dtype"] == dtype for c in val),
        "validation must run under autocast with the training dtype",
        yours=[(c["autocast"], c["autocast_dtype"]) for c in val][:3],
        expected=f"autocast enabled, dtype {dtype}",
        cause="evaluate inside torch.autocast(device_type, dtype=dtype), as the training forward",
    )
    _check_printed_validation(seen["printed"], expected_printed)
    diff = _max_state_diff(seen["state"], plain["state"])
    require(
        diff <= 1e-6,
        "validation must not change training: parameters after training with val_loader vs without",
        yours=f"largest difference {diff:.3g}",
        expected="the same parameters",
        cause="validation only reads: no optimizer step, no scaler, no gradients",
    )


def check_train_amp(train_amp) -> None:
    """Train a small classifier for 6 epochs with bfloat16 autocast on the CPU: one finite
    float per epoch, the loss falls, and the model's parameters change in place; then 3 epochs
    with a validation loader: one validation pass per epoch, in eval mode, without autograd,
    under autocast, printed, and training unchanged by it.

    Raises:
        CheckFailed: wrong type or length, a loss that does not fall, an untouched model, or a
            validation pass that differs from the above.
    """
    train_amp = student(train_amp, "train_amp")
    seen, losses = _student_training(train_amp, {"seed": 1, "epochs": 6, "dtype": torch.bfloat16})
    require(
        losses[-1] < 0.8 * losses[0],
        "the mean loss must fall over 6 epochs on this learnable dataset",
        yours=[round(v, 4) for v in losses],
        expected=f"last < 0.8 * first = {0.8 * losses[0]:.4f}",
        cause="train every batch with amp_train_step and an optimizer over model.parameters()",
    )
    require(
        _max_state_diff(seen["state"], _state(_classifier(1))) > 0,
        "train_amp must train the model it was given (in place)",
        yours="the model's parameters are unchanged",
        expected="changed parameters",
        cause="build the optimizer over model.parameters() after moving the model with model.to(device)",
    )
    spec = {"seed": 5, "epochs": 3, "dtype": torch.bfloat16}
    plain, _ = _student_training(train_amp, spec)
    validated, val_losses = _student_training(train_amp, {**spec, "validate": True})
    _check_validation(validated, 3, torch.bfloat16, plain, _reference_validation(spec))
    passed(
        f"train_amp: mean loss per epoch falls from {losses[0]:.3f} to {losses[-1]:.3f}; "
        "validation runs once per epoch in eval mode under autocast without gradients"
    )


def _reference_validation(spec: dict) -> list[tuple[float, float]]:
    """The reference's validation loss and accuracy per epoch for a training ``spec``."""
    ran = _train(reference(ASSIGNMENT).train_amp, **spec, validate=True)
    return _validation_figures(ran["printed"])


def _compare_training(train_amp, *, seed: int, epochs: int, dtype, device: str, tol: float):
    spec = {"seed": seed, "epochs": epochs, "dtype": dtype, "device": device}
    seen, losses = _student_training(train_amp, spec)
    expected = _train(reference(ASSIGNMENT).train_amp, **spec)
    ref_losses = expected["record"]["value"]
    close = all(math.isclose(a, b, rel_tol=tol, abs_tol=tol) for a, b in zip(losses, ref_losses))
    require(
        close,
        f"mean loss per epoch ({dtype}, {device})",
        yours=[round(v, 5) for v in losses],
        expected=[round(v, 5) for v in ref_losses],
        cause="SGD(lr, momentum=0.9), CrossEntropyLoss, a GradScaler enabled only for float16, "
        "and the mean of every batch's loss in each epoch (not the last batch's, not the sum)",
    )
    if dtype == torch.float16:
        largest = max(seen["grads"], default=0.0)
        require(
            largest > 1.0,
            f"float16 training must scale the loss before backward ({device})",
            yours=f"the largest gradient of the loss with respect to the logits was {largest:.3g} "
            "(a mean cross-entropy's own gradient is at most 1 / batch size)",
            expected="gradients multiplied by the scaler's scale (65536 to begin with)",
            cause="float16 gradients too small for float16 flush to zero: create the "
            "GradScaler enabled for float16, torch.amp.GradScaler(device.type, "
            "enabled=dtype == torch.float16), and pass it to amp_train_step",
        )
    diff = _max_state_diff(seen["state"], expected["state"])
    require(
        diff <= 10 * tol,
        f"parameters after training ({dtype}, {device})",
        yours=f"largest difference {diff:.3g}",
        expected=f"<= {10 * tol:g}",
        cause="the same optimizer, loss and steps as the reference",
    )


def check_train_amp_hidden(train_amp) -> None:
    """Compare the losses and parameters with the reference, bfloat16 and float16 on the CPU."""
    train_amp = student(train_amp, "train_amp")
    _compare_training(train_amp, seed=2, epochs=3, dtype=torch.bfloat16, device="cpu", tol=1e-4)
    _compare_training(train_amp, seed=3, epochs=3, dtype=torch.float16, device="cpu", tol=1e-4)
    spec = {"seed": 6, "epochs": 2, "dtype": torch.float16}
    plain, _ = _student_training(train_amp, spec)
    validated, _ = _student_training(train_amp, {**spec, "validate": True})
    _check_validation(validated, 2, torch.float16, plain, _reference_validation(spec))
    passed("train_amp agrees with the reference, and validates in float16 as in bfloat16")


def check_train_amp_cuda(train_amp) -> None:
    """On a GPU: float16 training compared with the reference."""
    if not cuda_or_not_checked("train_amp on a GPU"):
        return
    train_amp = student(train_amp, "train_amp")
    _compare_training(train_amp, seed=2, epochs=3, dtype=torch.float16, device="cuda", tol=1e-3)
    passed("train_amp agrees with the reference on this GPU")


# --------------------------------------------------------------------------- the ResNet demo's data
#: The ResNet-18 demo's sizes: images to train on, validation images, autocast dtype, batch
#: size and learning rate, on a GPU and on a CPU.
RESNET_DEMO = {
    True: {"train": 10_000, "val": 2_000, "dtype": torch.float16, "batch": 128, "lr": 0.05},
    False: {"train": 128, "val": 64, "dtype": torch.bfloat16, "batch": 32, "lr": 0.01},
}


def resnet_demo_data(on_gpu: bool, root: str | Path | None = None) -> dict:
    """The data of the notebook's ResNet-18 demo: CIFAR-10 (or its FakeData stand-in, with a
    notice) cut to the sizes of :data:`RESNET_DEMO`, never to more images than the data set
    has (the stand-in has 1024 per split).

    Args:
        on_gpu: Use the GPU's sizes (else the CPU's).
        root: Where CIFAR-10 is (or is downloaded to); default ``grader.runtime.datasets.DATA_ROOT``.

    Returns:
        ``{"train": DataLoader, "val": DataLoader, "name": str, "n_train": int, "n_val": int,
        "dtype": torch.dtype, "lr": float}``.
    """
    from torchvision import transforms

    from grader.runtime.datasets import DATA_ROOT, cifar10

    sizes = RESNET_DEMO[bool(on_gpu)]
    normalize = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.49, 0.48, 0.45), (0.25, 0.24, 0.26))]
    )
    root = DATA_ROOT if root is None else root
    train_set, name = cifar10(root, train=True, transform=normalize)
    val_set, _ = cifar10(root, train=False, transform=normalize)
    n_train, n_val = min(sizes["train"], len(train_set)), min(sizes["val"], len(val_set))
    subset = torch.utils.data.Subset
    return {
        "train": torch.utils.data.DataLoader(
            subset(train_set, range(n_train)), batch_size=sizes["batch"], shuffle=True
        ),
        "val": torch.utils.data.DataLoader(
            subset(val_set, range(n_val)), batch_size=sizes["batch"], shuffle=False
        ),
        "name": name,
        "n_train": n_train,
        "n_val": n_val,
        "dtype": sizes["dtype"],
        "lr": sizes["lr"],
    }
