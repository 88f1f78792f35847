"""Checks for 06_amp: autocast_dtypes, amp_train_step, train_amp.

Autocast and the grad scaler work on the CPU too (``torch.autocast("cpu", ...)`` and
``torch.amp.GradScaler("cpu")``), so every exercise is checked on the CPU on every
machine; the ``_cuda`` checks repeat them on a GPU against the reference, where the
float16 kernels and the CUDA autocast policy differ from the CPU's.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .common import call_student, cuda_or_not_checked, passed, require
from .course import reference

ASSIGNMENT = "06_amp"


# --------------------------------------------------------------------------- autocast_dtypes
def _operands(device: str) -> dict[str, torch.Tensor]:
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
    """Run every case of :data:`AUTOCAST_CASES` under ``torch.autocast(device_type, dtype)``.

    Args:
        device_type: ``"cpu"`` or ``"cuda"``.
        dtype: The autocast dtype, ``torch.float16`` or ``torch.bfloat16``.

    Returns:
        Case name -> the dtype of its output on this machine.
    """
    device = "cuda:0" if device_type == "cuda" else "cpu"
    operands = _operands(device)
    with torch.autocast(device_type, dtype=dtype):
        return {name: fn(operands).dtype for name, (_, fn) in AUTOCAST_CASES.items()}


def _why(name: str, expected: torch.dtype, device_type: str) -> str:
    if expected == torch.float32 and name in ("relu", "linear_plus_input"):
        return (
            "autocast changes only ops on its lists; others keep their inputs' dtype, and mixing "
            "float16 with float32 promotes to float32"
        )
    if expected == torch.float32:
        return "softmax, sum, layer_norm and losses are on CUDA's float32 list: autocast runs them in float32"
    if name in ("matmul", "conv2d"):
        return "matmul/conv/linear are on the lower-precision list on every device"
    if device_type == "cpu":
        return (
            "the CPU policy has no float32 list for softmax, sum or layer_norm: they keep their "
            "float16 input's dtype (CUDA's policy differs)"
        )
    return "an op off autocast's lists keeps the dtype of its (float16) input"


def _check_entries(autocast_dtypes, device_type: str, expected: dict, source: str) -> None:
    require(
        isinstance(autocast_dtypes, dict),
        "AUTOCAST_DTYPES must be a dict",
        yours=type(autocast_dtypes).__name__,
        expected="dict[str, torch.dtype]",
        cause='write {"cpu/matmul": torch.float16, ..., "cuda/matmul": ..., ...}',
    )
    keys = [f"{device_type}/{name}" for name in AUTOCAST_CASES]
    missing = [k for k in keys if k not in autocast_dtypes]
    require(
        not missing,
        f"AUTOCAST_DTYPES lacks entries for {device_type}",
        yours=sorted(k for k in autocast_dtypes if str(k).startswith(device_type + "/")),
        expected=keys,
        cause="one entry per case of AUTOCAST_CASES, for both 'cpu/...' and 'cuda/...'",
    )
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
    """Compare the ``cpu/`` predictions with what CPU autocast does on this machine.

    Raises:
        CheckFailed: an entry is missing or differs.
    """
    _check_entries(
        autocast_dtypes, "cpu", observed_autocast_dtypes("cpu"), "observed on this machine"
    )
    passed("every cpu/ prediction matches what torch.autocast('cpu', torch.float16) does")


def check_autocast_dtypes_hidden(autocast_dtypes) -> None:
    """Compare the ``cuda/`` predictions with the GPU when there is one, else with the
    documented CUDA policy (the ``_cuda`` cell then checks them on a GPU)."""
    if torch.cuda.is_available():
        expected, source = observed_autocast_dtypes("cuda"), "observed on this GPU"
    else:
        expected, source = DOCUMENTED_CUDA_FLOAT16, "the documented CUDA policy"
    _check_entries(autocast_dtypes, "cuda", expected, source)
    passed("every cuda/ prediction matches the CUDA autocast policy")


def check_autocast_dtypes_cuda(autocast_dtypes) -> None:
    """On a GPU: compare the ``cuda/`` predictions with what CUDA autocast does."""
    if not cuda_or_not_checked("AUTOCAST_DTYPES against CUDA autocast"):
        return
    _check_entries(
        autocast_dtypes, "cuda", observed_autocast_dtypes("cuda"), "observed on this GPU"
    )
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


def _run_steps(
    step_fn,
    *,
    device: str = "cpu",
    dtype: torch.dtype = torch.float16,
    max_grad_norm: float | None = None,
    loss_fn=F.mse_loss,
    steps: int = 4,
    momentum: float = 0.0,
    init_scale: float = 2.0**12,
    growth_interval: int = 2,
    seed: int = 0,
    name: str | None = None,
):
    """Train a fresh MLP for ``steps`` steps with ``step_fn``; return model, scaler, losses."""
    model = _mlp(seed).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=momentum)
    device_type = torch.device(device).type
    scaler = torch.amp.GradScaler(
        device_type,
        init_scale=init_scale,
        growth_interval=growth_interval,
        enabled=dtype == torch.float16,
    )
    losses = [
        call_student(
            step_fn,
            model,
            x,
            y,
            loss_fn,
            optimizer,
            scaler,
            device_type=device_type,
            dtype=dtype,
            max_grad_norm=max_grad_norm,
            name=name,
        )
        for x, y in _batches(steps, seed + 1, device)
    ]
    return model, scaler, losses


def _max_param_diff(a: nn.Module, b: nn.Module) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def _expected_sgd_run(**kwargs):
    """The same run written out step by step: the specification of amp_train_step."""

    def step(model, x, y, loss_fn, optimizer, scaler, *, device_type, dtype, max_grad_norm):
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

    return _run_steps(step, **kwargs)


_STEP_CAUSES = (
    "check, in order: optimizer.zero_grad() first; forward and loss inside torch.autocast; "
    "scaler.scale(loss).backward() outside it (not loss.backward()); scaler.step(optimizer); "
    "scaler.update()"
)


def _compare_run(step_fn, what: str, cause: str, **kwargs) -> None:
    model, scaler, losses = _run_steps(step_fn, name="amp_train_step", **kwargs)
    ref_model, ref_scaler, ref_losses = _expected_sgd_run(**kwargs)
    diff = _max_param_diff(model, ref_model)
    require(
        diff <= 1e-5,
        f"parameters after {len(losses)} steps ({what}): largest difference from the expected",
        yours=f"{diff:.3g}",
        expected="<= 1e-05",
        cause=cause,
    )
    require(
        scaler.get_scale() == ref_scaler.get_scale(),
        f"scaler.get_scale() after {len(losses)} steps ({what})",
        yours=scaler.get_scale(),
        expected=ref_scaler.get_scale(),
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
        torch.allclose(loss.float(), expected.float(), rtol=1e-3, atol=1e-5),
        "the returned loss (before the update)",
        yours=loss.item(),
        expected=expected.item(),
        cause="return the unscaled loss computed in this step, not the scaled one",
    )


def check_amp_train_step(amp_train_step) -> None:
    """Check on the CPU with float16 autocast and an enabled GradScaler: the returned
    loss, parameters and scale after several steps, clipping, and a skipped step.

    Raises:
        CheckFailed: a step differs from zero_grad / autocast forward / scaled backward /
            unscale_ then clip / scaler.step / scaler.update.
    """
    model, scaler, losses = _run_steps(amp_train_step, steps=1, name="amp_train_step")
    with torch.autocast("cpu", dtype=torch.float16):
        x, y = _batches(1, 1)[0]
        expected_loss = F.mse_loss(_mlp(0)(x), y)
    _check_returned_loss(losses[0], expected_loss)

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
    model = _mlp(0)
    before = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    x, y = _batches(1, 1)[0]

    def inf_loss(out, target):
        return F.mse_loss(out, target) * math.inf

    call_student(
        amp_train_step,
        model,
        x,
        y,
        inf_loss,
        optimizer,
        scaler,
        device_type="cpu",
        dtype=torch.float16,
        name="amp_train_step",
    )
    require(
        _max_param_diff(model, before) == 0.0,
        "after a step with infinite gradients the parameters must be unchanged (step skipped)",
        yours=f"changed by up to {_max_param_diff(model, before):.3g}",
        expected="unchanged",
        cause="call scaler.step(optimizer), not optimizer.step(): it skips the step on inf/NaN",
    )
    require(
        scaler.get_scale() == 2.0**11,
        "scale after a step with infinite gradients (init_scale 4096, backoff_factor 0.5)",
        yours=scaler.get_scale(),
        expected=2.0**11,
        cause="call scaler.update() after scaler.step(): it lowers the scale after an overflow",
    )
    passed("amp_train_step trains like the recipe, clips unscaled gradients and skips inf steps")


def check_amp_train_step_hidden(amp_train_step) -> None:
    """Compare with the reference: momentum, bfloat16 (scaler disabled), clipping."""
    ref = reference(ASSIGNMENT).amp_train_step
    for kwargs in (
        {"momentum": 0.9, "steps": 5, "seed": 3},
        {"dtype": torch.bfloat16, "steps": 4, "seed": 4},
        {"max_grad_norm": 0.5, "momentum": 0.9, "steps": 4, "seed": 5, "growth_interval": 1},
    ):
        model, scaler, losses = _run_steps(amp_train_step, name="amp_train_step", **kwargs)
        ref_model, ref_scaler, ref_losses = _run_steps(ref, **kwargs)
        diff = _max_param_diff(model, ref_model)
        require(
            diff <= 1e-5 and scaler.get_scale() == ref_scaler.get_scale(),
            f"parameters and scale after training with {kwargs}",
            yours=f"parameter difference {diff:.3g}, scale {scaler.get_scale()}",
            expected=f"difference <= 1e-05, scale {ref_scaler.get_scale()}",
            cause=_STEP_CAUSES,
        )
    passed("amp_train_step agrees with the reference")


def check_amp_train_step_cuda(amp_train_step) -> None:
    """On a GPU: float16 with the scaler and clipping, compared with the reference."""
    if not cuda_or_not_checked("amp_train_step with CUDA float16 autocast"):
        return
    ref = reference(ASSIGNMENT).amp_train_step
    for kwargs in ({"steps": 4}, {"steps": 3, "max_grad_norm": 0.05, "momentum": 0.9}):
        model, scaler, _ = _run_steps(
            amp_train_step, device="cuda:0", name="amp_train_step", **kwargs
        )
        ref_model, ref_scaler, _ = _run_steps(ref, device="cuda:0", **kwargs)
        diff = _max_param_diff(model, ref_model)
        require(
            diff <= 1e-4 and scaler.get_scale() == ref_scaler.get_scale(),
            f"CUDA parameters and scale after training with {kwargs}",
            yours=f"parameter difference {diff:.3g}, scale {scaler.get_scale()}",
            expected=f"difference <= 1e-04, scale {ref_scaler.get_scale()}",
            cause=_STEP_CAUSES,
        )
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


def _train(train_amp, *, seed: int, epochs: int, dtype, device: str = "cpu", name=None):
    model = _classifier(seed)
    loader = torch.utils.data.DataLoader(_classification_data(seed), batch_size=32, shuffle=False)
    losses = call_student(train_amp, model, loader, epochs, 0.05, device, dtype, name=name)
    return model, losses


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


def check_train_amp(train_amp) -> None:
    """Train a small classifier for 6 epochs with bfloat16 autocast on the CPU: one finite
    float per epoch, the loss falls, and the model's parameters change in place.

    Raises:
        CheckFailed: wrong type or length, a loss that does not fall, or an untouched model.
    """
    before = _classifier(1)
    model, losses = _train(train_amp, seed=1, epochs=6, dtype=torch.bfloat16, name="train_amp")
    _require_loss_list(losses, 6)
    require(
        losses[-1] < 0.8 * losses[0],
        "the mean loss must fall over 6 epochs on this learnable dataset",
        yours=[round(v, 4) for v in losses],
        expected=f"last < 0.8 * first = {0.8 * losses[0]:.4f}",
        cause="train every batch with amp_train_step and an optimizer over model.parameters()",
    )
    require(
        _max_param_diff(model.cpu(), before) > 0,
        "train_amp must train the model it was given (in place)",
        yours="the model's parameters are unchanged",
        expected="changed parameters",
        cause="build the optimizer over model.parameters() after moving the model with model.to(device)",
    )
    passed(f"train_amp: mean loss per epoch falls from {losses[0]:.3f} to {losses[-1]:.3f}")


def _compare_training(train_amp, *, seed: int, epochs: int, dtype, device: str, tol: float):
    ref = reference(ASSIGNMENT).train_amp
    model, losses = _train(
        train_amp, seed=seed, epochs=epochs, dtype=dtype, device=device, name="train_amp"
    )
    _require_loss_list(losses, epochs)
    ref_model, ref_losses = _train(ref, seed=seed, epochs=epochs, dtype=dtype, device=device)
    close = all(math.isclose(a, b, rel_tol=tol, abs_tol=tol) for a, b in zip(losses, ref_losses))
    require(
        close,
        f"mean loss per epoch ({dtype}, {device})",
        yours=[round(v, 5) for v in losses],
        expected=[round(v, 5) for v in ref_losses],
        cause="SGD(lr, momentum=0.9), CrossEntropyLoss, a GradScaler enabled only for float16, "
        "and the mean of every batch's loss in each epoch (not the last batch's, not the sum)",
    )
    diff = _max_param_diff(model.to("cpu"), ref_model.to("cpu"))
    require(
        diff <= 10 * tol,
        f"parameters after training ({dtype}, {device})",
        yours=f"largest difference {diff:.3g}",
        expected=f"<= {10 * tol:g}",
        cause="the same optimizer, loss and steps as the reference",
    )


def check_train_amp_hidden(train_amp) -> None:
    """Compare the losses and parameters with the reference, bfloat16 and float16 on the CPU."""
    _compare_training(train_amp, seed=2, epochs=3, dtype=torch.bfloat16, device="cpu", tol=1e-4)
    _compare_training(train_amp, seed=3, epochs=3, dtype=torch.float16, device="cpu", tol=1e-4)
    passed("train_amp agrees with the reference")


def check_train_amp_cuda(train_amp) -> None:
    """On a GPU: float16 training compared with the reference."""
    if not cuda_or_not_checked("train_amp on a GPU"):
        return
    _compare_training(train_amp, seed=2, epochs=3, dtype=torch.float16, device="cuda", tol=1e-3)
    passed("train_amp agrees with the reference on this GPU")


def format_autocast_table(dtypes: dict[str, torch.dtype]) -> str:
    """The cases with their outputs' dtypes as an aligned text table, for the notebook."""
    width = max(len(desc) for desc, _ in AUTOCAST_CASES.values())
    rows = [f"{'op':<{width}}  output dtype"]
    for name, (desc, _) in AUTOCAST_CASES.items():
        rows.append(f"{desc:<{width}}  {str(dtypes[name]).replace('torch.', '')}")
    return "\n".join(rows)
