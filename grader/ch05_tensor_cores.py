"""Checks for 05_tensor_cores: tensor_core_violations, pad_linear, matmul_tflops, CASE_FINDINGS.

The three "find what is wrong" cases and the list of problems they are judged against are
defined here once (:data:`CASES`, :data:`PROBLEMS`); the notebook prints them.
``matmul_tflops`` is checked on the simulated GPU's matmul model (virtual clock, exact
times) on every machine, and against the reference on a real GPU.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .common import (
    CheckFailed,
    call_student,
    cuda_or_not_checked,
    expect_raises,
    fail,
    passed,
    require,
)
from .course import reference
from .simulate import SIM_MATMUL_TFLOPS, SIM_MISALIGNED_FRACTION, simulated_cuda

ASSIGNMENT = "05_tensor_cores"

#: The problems a case can have (keys are what CASE_FINDINGS uses).
PROBLEMS: dict[str, str] = {
    "misaligned_features": "a Linear layer's in/out features are not multiples of 8 (fp16/bf16 Tensor Cores)",
    "misaligned_channels": "a Conv2d layer's in/out channels are not multiples of 8",
    "vocab_not_padded": "the vocabulary size (50257) is not padded (to 50304, a multiple of 64)",
    "fp32_without_tf32": "float32 matmuls with TF32 disabled, so they cannot use Tensor Cores",
    "channels_first": "convolutions on NCHW (channels-first) tensors instead of channels_last",
    "math_heavy_activation": "a math-heavy activation (Tanh) where a math-light one (ReLU) would do",
}

#: The three cases, as shown in the notebook.
CASES: dict[str, str] = {
    "case1": """# Case 1: an MNIST classifier trained with fp16 autocast on a GPU
class Case1(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(784, 500), nn.Tanh(), nn.Linear(500, 256), nn.Tanh())
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        return self.head(self.encoder(x))""",
    "case2": """# Case 2: an image model in fp16, fed NCHW batches from the data loader
model = nn.Sequential(
    nn.Conv2d(3, 30, 3, padding=1), nn.ReLU(),
    nn.Conv2d(30, 64, 3, padding=1), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 8),
).cuda().half()
images = torch.randn(256, 3, 224, 224, device="cuda", dtype=torch.half)  # NCHW
out = model(images)""",
    "case3": """# Case 3: a language-model head trained in float32
torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("highest")
lm_head = nn.Linear(1024, 50257).cuda()
logits = lm_head(torch.randn(64, 1024, device="cuda"))""",
}


class Case1(nn.Module):
    """Case 1's model (see :data:`CASES`)."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(784, 500), nn.Tanh(), nn.Linear(500, 256), nn.Tanh())
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        return self.head(self.encoder(x))


# --------------------------------------------------------------------------- tensor_core_violations
def _violations(model: nn.Module, multiple: int) -> list[str]:
    out = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            dims = (module.in_features, module.out_features)
        elif isinstance(module, nn.Conv2d):
            dims = (module.in_channels, module.out_channels)
        else:
            continue
        if any(d % multiple for d in dims):
            out.append(name)
    return out


class _ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3)  # in 3: a violation (the image's channels)
        self.blocks = nn.ModuleDict({"a": nn.Conv2d(32, 48, 3), "b": nn.Conv2d(48, 36, 1)})
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(36, 16)


def check_tensor_core_violations(tensor_core_violations) -> None:
    """Check Case 1 for fp16, bf16, TF32 (float32) and int8, and a conv net with nested modules.

    Raises:
        CheckFailed: a wrong list of layer names, or an unsupported dtype accepted.
    """
    cases = [
        (Case1(), torch.float16, 8),
        (Case1(), torch.bfloat16, 8),
        (Case1(), torch.float32, 4),
        (Case1(), torch.int8, 16),
        (_ConvNet(), torch.float16, 8),
        (_ConvNet(), torch.float32, 4),
    ]
    for model, dtype, multiple in cases:
        got = call_student(tensor_core_violations, model, dtype)
        expected = _violations(model, multiple)
        require(
            isinstance(got, list),
            "tensor_core_violations must return a list of names",
            yours=type(got).__name__,
            expected="list",
            cause="return [name for name, module in model.named_modules() if ...]",
        )
        if got != expected:
            missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
            if any("." in name for name in missing) and not any("." in name for name in got):
                cause = "walk every module, nested ones too: model.named_modules(), not model.children()"
            elif dtype in (torch.float32, torch.int8) and set(got) == set(_violations(model, 8)):
                cause = f"the multiple depends on the dtype: {multiple} for {dtype} (8 for fp16/bf16, 4 for TF32, 16 for int8)"
            else:
                cause = "check both dimensions: in_features and out_features (in_channels and out_channels)"
            fail(
                f"tensor_core_violations({type(model).__name__}, {dtype})",
                yours=got,
                expected=expected,
                cause=f"{cause} (missing: {missing}, extra: {extra})",
            )
    expect_raises(
        ValueError,
        tensor_core_violations,
        Case1(),
        torch.float64,
        what="tensor_core_violations(model, torch.float64) must raise ValueError",
        cause="Tensor Cores have no float64 alignment rule here: raise ValueError for dtypes other than fp16, bf16, float32 (TF32) and int8",
    )
    passed("tensor_core_violations finds misaligned Linear and Conv2d layers for every dtype")


def check_tensor_core_violations_hidden(tensor_core_violations) -> None:
    """Compare with the reference on further models."""
    ref = reference(ASSIGNMENT).tensor_core_violations
    models = [
        nn.Linear(64, 64),
        nn.TransformerEncoderLayer(60, 4, 100),
        nn.Sequential(nn.Sequential(nn.Conv2d(8, 12, 1)), nn.Linear(16, 24)),
    ]
    for model in models:
        for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.int8):
            got, expected = call_student(tensor_core_violations, model, dtype), ref(model, dtype)
            require(
                got == expected,
                f"tensor_core_violations({type(model).__name__}, {dtype})",
                yours=got,
                expected=expected,
                cause="every nn.Linear and nn.Conv2d in named_modules(), both dimensions, the dtype's multiple",
            )
    passed("tensor_core_violations agrees with the reference")


# --------------------------------------------------------------------------- pad_linear
def _check_padded(new, old: nn.Linear, multiple: int, call: str) -> None:
    require(
        isinstance(new, nn.Linear),
        f"{call} must return an nn.Linear",
        yours=type(new).__name__,
        expected="nn.Linear",
        cause="build a new nn.Linear with the rounded sizes",
    )
    want_in, want_out = (
        math.ceil(old.in_features / multiple) * multiple,
        math.ceil(old.out_features / multiple) * multiple,
    )
    require(
        (new.in_features, new.out_features) == (want_in, want_out),
        f"{call}: new in/out features",
        yours=(new.in_features, new.out_features),
        expected=(want_in, want_out),
        cause="round both up to the next multiple",
    )
    require(
        new.weight.dtype == old.weight.dtype,
        f"{call}: dtype",
        yours=new.weight.dtype,
        expected=old.weight.dtype,
        cause="create the new layer with dtype=layer.weight.dtype",
    )
    require(
        new.weight.device == old.weight.device,
        f"{call}: device",
        yours=str(new.weight.device),
        expected=str(old.weight.device),
        cause="create the new layer with device=layer.weight.device; nn.Linear(...) alone lands on the CPU",
    )
    require(
        new.weight.requires_grad == old.weight.requires_grad,
        f"{call}: requires_grad",
        yours=new.weight.requires_grad,
        expected=old.weight.requires_grad,
        cause="copy requires_grad from the old layer",
    )
    require(
        (new.bias is None) == (old.bias is None),
        f"{call}: bias",
        yours="no bias" if new.bias is None else "a bias",
        expected="no bias" if old.bias is None else "a bias",
        cause="keep the bias (bias=layer.bias is not None) and copy its values",
    )
    if old.weight.device.type == "meta":
        return
    with torch.no_grad():
        x = torch.randn(5, old.in_features, dtype=old.weight.dtype, device=old.weight.device)
        padded = torch.zeros(5, want_in, dtype=x.dtype, device=x.device)
        padded[:, : old.in_features] = x
        y_old, y_new = old(x), new(padded)
    tol = 1e-6 if old.weight.dtype == torch.float32 else 1e-2
    require(
        torch.allclose(y_new[:, : old.out_features].float(), y_old.float(), atol=tol, rtol=tol),
        f"{call}: the first out_features outputs",
        yours="different from the old layer's",
        expected="equal to the old layer's for zero-padded inputs",
        cause="copy the old weight into new.weight[:out, :in] and the old bias into new.bias[:out]",
    )
    require(
        bool((y_new[:, old.out_features :] == 0).all()),
        f"{call}: the extra outputs",
        yours=y_new[:, old.out_features :].flatten()[:4].tolist(),
        expected="exactly 0",
        cause="zero the padding: start from torch.zeros for the weight and bias, not the random initial values",
    )


def check_pad_linear(pad_linear) -> None:
    """Check sizes, values, zero padding, bias, dtype, device (a ``meta`` layer) and requires_grad.

    Raises:
        CheckFailed: on the first property that differs.
    """
    torch.manual_seed(0)
    frozen = nn.Linear(13, 7)
    frozen.requires_grad_(False)
    layers = [
        (nn.Linear(10, 5), 8),
        (nn.Linear(16, 3, bias=False), 8),
        (nn.Linear(50, 30).to(torch.bfloat16), 16),
        (frozen, 4),
        (nn.Linear(1024, 50257, device="meta"), 64),
    ]
    for layer, multiple in layers:
        before = layer.weight.detach().clone() if layer.weight.device.type != "meta" else None
        try:
            new = call_student(pad_linear, layer, multiple)
        except CheckFailed as err:
            if layer.weight.device.type != "meta" or "meta" not in str(err):
                raise
            fail(
                "pad_linear on a layer on the 'meta' device (it has shapes but no data) failed",
                yours=str(err).splitlines()[0],
                expected="a new layer on the same device, values copied there",
                cause="create the new layer with device=layer.weight.device and copy on that device (no .cpu())",
            )
        call = f"pad_linear(Linear({layer.in_features}, {layer.out_features}, {layer.weight.dtype}, {layer.weight.device.type}), {multiple})"
        _check_padded(new, layer, multiple, call)
        if before is not None:
            require(
                torch.equal(layer.weight, before) and new is not layer,
                f"{call} must not change the old layer",
                yours="changed",
                expected="unchanged, a new layer returned",
                cause="build a new layer; copy values into it",
            )
    nine = nn.Linear(9, 9)
    _check_padded(call_student(pad_linear, nine), nine, 8, "pad_linear(layer) (default multiple 8)")
    passed("pad_linear pads with zeros and keeps values, bias, dtype, device and requires_grad")


def check_pad_linear_cuda(pad_linear) -> None:
    """On a GPU: an fp16 layer on cuda:0 stays there, with the same outputs."""
    if not cuda_or_not_checked("pad_linear on a real GPU"):
        return
    layer = nn.Linear(100, 50).to("cuda", torch.float16)
    _check_padded(
        call_student(pad_linear, layer, 8), layer, 8, "pad_linear(fp16 Linear(100, 50) on cuda:0)"
    )
    passed("pad_linear keeps a GPU layer on the GPU")


# --------------------------------------------------------------------------- matmul_tflops
def check_matmul_tflops(matmul_tflops) -> None:
    """On the simulated GPU's matmul model (virtual clock): exact TFLOP/s, aligned beats misaligned.

    Raises:
        CheckFailed: off by more than 5%, a non-float, or 4095 not slower than 4096.
    """
    cases = [(4096, torch.bfloat16), (4095, torch.bfloat16), (1024, torch.float16)]
    with simulated_cuda(transfers=True, allow_real_gpu=True, virtual_time=True):
        results = {case: call_student(matmul_tflops, *case) for case in cases}
    for (n, dtype), got in results.items():
        peak = SIM_MATMUL_TFLOPS[dtype] * (1.0 if n % 8 == 0 else SIM_MISALIGNED_FRACTION)
        require(
            isinstance(got, float),
            f"matmul_tflops({n}, {dtype}) must return a float",
            yours=f"{got!r}",
            expected="a float (TFLOP/s)",
            cause="return 2 * n**3 / seconds / 1e12 as a float",
        )
        ratio = got / peak
        if abs(ratio / 1000 - 1) < 0.05:
            cause = "report TFLOP/s (10^12 flops per second), not GFLOP/s"
        elif ratio > 3:
            cause = "the matmul was not finished when the clock stopped: synchronize before reading the time"
        elif abs(ratio / 2 - 1) < 0.05:
            cause = "a matmul of two n x n matrices is 2*n**3 flops, not 4*n**3"
        elif abs(ratio * 2 - 1) < 0.05:
            cause = "count 2*n**3 flops (a multiply and an add per term), not n**3"
        else:
            cause = "time only the matmul (create the inputs before starting the clock), with warm-up, and take the median"
        require(
            0.95 <= ratio <= 1.05,
            f"matmul_tflops({n}, {dtype}) on the simulated GPU",
            yours=f"{got:.1f} TFLOP/s",
            expected=f"{peak:.1f} TFLOP/s",
            cause=cause,
        )
    require(
        results[(4096, torch.bfloat16)] > results[(4095, torch.bfloat16)],
        "4096 (a multiple of 8) must beat 4095",
        yours=results,
        expected="aligned faster",
        cause="measure each size separately",
    )
    passed("matmul_tflops measures the simulated GPU exactly, and 4096 beats 4095 in bf16")


def check_matmul_tflops_cuda(matmul_tflops) -> None:
    """On a real GPU: within [0.8, 1.25] of the reference at 4096 bf16; 8192 faster than 8191."""
    if not cuda_or_not_checked("matmul_tflops on real Tensor Cores"):
        return
    ref = reference(ASSIGNMENT).matmul_tflops
    mine, theirs = call_student(matmul_tflops, 4096, torch.bfloat16), ref(4096, torch.bfloat16)
    ratio = mine / theirs
    # Reference figure: about 0.98-1.02 for the reference against itself.
    require(
        0.8 <= ratio <= 1.25,
        "matmul_tflops(4096, bf16) / reference on this GPU",
        yours=f"{mine:.0f} TFLOP/s (ratio {ratio:.2f})",
        expected=f"{theirs:.0f} TFLOP/s",
        cause="2*n**3 flops, synchronize, warm up, median of repeats",
    )
    aligned, misaligned = (
        call_student(matmul_tflops, 8192, torch.bfloat16),
        call_student(matmul_tflops, 8191, torch.bfloat16),
    )
    require(
        aligned > misaligned,
        "8192 must beat 8191 in bf16 on this GPU",
        yours=f"{aligned:.0f} vs {misaligned:.0f} TFLOP/s",
        expected="8192 faster",
        cause="time each size the same way",
    )
    passed(
        f"matmul_tflops on this GPU: {mine:.0f} TFLOP/s at 4096 (reference {theirs:.0f}); 8192: {aligned:.0f}, 8191: {misaligned:.0f}"
    )


# --------------------------------------------------------------------------- CASE_FINDINGS
def check_case_findings(case_findings) -> None:
    """Check CASE_FINDINGS maps case1..case3 to sets of problem names from PROBLEMS."""
    require(
        isinstance(case_findings, dict) and set(case_findings) == set(CASES),
        "CASE_FINDINGS must map 'case1', 'case2', 'case3' to sets",
        yours=sorted(case_findings)
        if isinstance(case_findings, dict)
        else type(case_findings).__name__,
        expected=sorted(CASES),
        cause="one entry per case",
    )
    for case, found in case_findings.items():
        require(
            isinstance(found, set),
            f"CASE_FINDINGS[{case!r}] must be a set",
            yours=type(found).__name__,
            expected="set",
            cause="use {'problem_a', 'problem_b'}",
        )
        unknown = sorted(set(found) - set(PROBLEMS))
        require(
            not unknown,
            f"CASE_FINDINGS[{case!r}] names unknown problems",
            yours=unknown,
            expected=sorted(PROBLEMS),
            cause="use the problem names printed in the notebook",
        )
    passed("CASE_FINDINGS names known problems for every case")


def check_case_findings_hidden(case_findings) -> None:
    """Compare with the reference findings."""
    check_case_findings(case_findings)
    truth = reference(ASSIGNMENT).CASE_FINDINGS
    for case in CASES:
        require(
            case_findings[case] == truth[case],
            f"findings for {case}",
            yours=sorted(case_findings[case]),
            expected=sorted(truth[case]),
            cause="look at the sizes, dtypes, memory format, activations and TF32 settings in the case's code",
        )
    passed("CASE_FINDINGS agrees with the reference")
