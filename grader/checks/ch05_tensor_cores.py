"""Checks for 05_tensor_cores: tensor_core_violations, pad_linear, matmul_tflops, CASE_FINDINGS.

The three "find what is wrong" cases and the list of problems they are judged against are
defined here once (:data:`CASES`, :data:`PROBLEMS`); the notebook prints them.

The checks reach the student's code through a :class:`~grader.runtime.remote.Handle`: the ``_probe_*``
functions below run where the student's code lives (under autograde, in their kernel), build
the models and layers there with the seeded builders of this module, call the student's
function and hand back plain data (names, shapes, dtypes, tensors, timings). Every expected
value, comparison and use of the reference is here, on the grading side.
``matmul_tflops`` is checked on the simulated GPU's matmul model (virtual clock, exact times)
on every machine, and against the reference on a real GPU.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from grader.checks.common import (
    CheckFailed,
    Partial,
    call_student,
    cuda_or_not_checked,
    expect_raises,
    fail,
    not_attempted,
    passed,
    require,
)
from grader.runtime.course import reference
from grader.runtime.remote import Recorded, attempt, kernel_side, student
from grader.runtime.simulate import SIM_MATMUL_TFLOPS, SIM_MISALIGNED_FRACTION, simulated_cuda

ASSIGNMENT = "05_tensor_cores"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True

#: The problems a case can have (keys are what CASE_FINDINGS uses). Not every entry is a
#: problem of some case, and not every entry is a problem at all.
PROBLEMS: dict[str, str] = {
    "misaligned_features": "a Linear layer's in/out features are not multiples of 8 (fp16/bf16): "
    "Tensor Cores still run, but waste part of their tiles",
    "misaligned_channels": "a Conv2d layer's in/out channels are not multiples of 8 (fp16/bf16)",
    "vocab_not_padded": "the vocabulary size (50257) is not padded (to 50304, a multiple of 64)",
    "fp32_without_tf32": "float32 matmuls with TF32 disabled, so they cannot use Tensor Cores",
    "channels_first": "fp16 convolutions on NCHW (channels-first) tensors instead of channels_last",
    "math_heavy_activation": "a math-heavy activation (Tanh, GELU) instead of ReLU",
    "unfused_elementwise": "a chain of elementwise operations run one kernel each, every one "
    "reading and writing the whole tensor",
    "drop_last_discards_data": "the DataLoader silently drops part of the data set every epoch",
    "model_called_on_loader": "the model is called on the DataLoader object instead of on its batches",
    "feature_mismatch": "the data has a different number of features than the first layer expects",
}

#: The three cases, as shown in the notebook.
CASES: dict[str, str] = {
    "case1": """# Case 1: an MNIST classifier trained with bf16 autocast on a GPU (no grad scaler needed)
train_set = TensorDataset(torch.randn(123, 784), torch.randint(0, 10, (123,)))
loader = DataLoader(train_set, batch_size=64, shuffle=True, drop_last=True)

class Case1(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(784, 500), nn.Tanh(), nn.Linear(500, 256))
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        h = self.encoder(x)
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h**3)))  # GELU by hand
        return self.head(h)

model = Case1().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x.cuda()), y.cuda())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()""",
    "case2": """# Case 2: an image model in fp16, fed NCHW batches from a DataLoader
model = nn.Sequential(
    nn.Conv2d(3, 30, 3, padding=1), nn.ReLU(),
    nn.Conv2d(30, 64, 3, padding=1), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 8),
).cuda().half()
images = torch.randn(1024, 3, 224, 224, device="cuda", dtype=torch.half)  # NCHW
loader = DataLoader(TensorDataset(images), batch_size=256)
out = model(loader)""",
    "case3": """# Case 3: a language-model head trained in float32
torch.set_float32_matmul_precision("highest")  # strict float32 matmuls
features = torch.randn(64, 15, device="cuda")   # 15 features per token from the encoder
lm_head = nn.Linear(128, 50257).cuda()
logits = lm_head(features)""",
}

#: Where to look for each problem: the feedback names these, never the problem itself.
_WHERE = {
    "misaligned_features": "the sizes of the Linear layers",
    "misaligned_channels": "the channel counts of the convolutions",
    "vocab_not_padded": "the size of the output layer",
    "fp32_without_tf32": "the float32 precision setting",
    "channels_first": "the memory format of the images",
    "unfused_elementwise": "the arithmetic in forward()",
    "drop_last_discards_data": "the data loading",
    "model_called_on_loader": "how the data reaches the model",
    "feature_mismatch": "the shape of the data against the first layer",
    "math_heavy_activation": "the activations",
}


class Case1(nn.Module):
    """Case 1's model (see :data:`CASES`)."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(784, 500), nn.Tanh(), nn.Linear(500, 256))
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        h = self.encoder(x)
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h**3)))
        return self.head(h)


def _replay(name: str, record: dict, label: str):
    """The value of one recorded call of the student's function (or its failure, as a check
    failure naming ``label``)."""
    return call_student(Recorded(name, [((), {})], [record]), name=label)


# --------------------------------------------------------------------------- tensor_core_violations
class _ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3)  # in 3: a violation (the image's channels)
        self.blocks = nn.ModuleDict({"a": nn.Conv2d(32, 48, 3), "b": nn.Conv2d(48, 36, 1)})
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(36, 16)


@kernel_side
def _build_case1() -> nn.Module:
    torch.manual_seed(0)
    return Case1()


@kernel_side
def _build_convnet() -> nn.Module:
    torch.manual_seed(0)
    return _ConvNet()


@kernel_side
def _build_linear64() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(64, 64)


@kernel_side
def _build_transformer_layer() -> nn.Module:
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(60, 4, 100)


@kernel_side
def _build_nested() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Sequential(nn.Conv2d(8, 12, 1)), nn.Linear(16, 24))


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


def _probe_violations(tensor_core_violations, cases: list) -> list:
    """Probe: the student's answer for each ``(builder, dtype)``, on a model built here."""
    return [attempt(tensor_core_violations, builder(), dtype) for builder, dtype in cases]


_VISIBLE_CASES = [
    (_build_case1, torch.float16, 8),
    (_build_case1, torch.bfloat16, 8),
    (_build_case1, torch.float32, 4),
    (_build_case1, torch.int8, 16),
    (_build_convnet, torch.float16, 8),
    (_build_convnet, torch.float32, 4),
]


def check_tensor_core_violations(tensor_core_violations) -> None:
    """Check Case 1 for fp16, bf16, TF32 (float32) and int8, and a conv net with nested modules.

    Raises:
        CheckFailed: a wrong list of layer names, or an unsupported dtype accepted.
    """
    tensor_core_violations = student(tensor_core_violations, "tensor_core_violations")
    cases = [(b, d) for b, d, _ in _VISIBLE_CASES] + [(_build_case1, torch.float64)]
    records = tensor_core_violations.probe(_probe_violations, cases)
    for (builder, dtype, multiple), record in zip(_VISIBLE_CASES, records):
        model = builder()
        label = f"tensor_core_violations({type(model).__name__}, {dtype})"
        got = _replay("tensor_core_violations", record, label)
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
                label,
                yours=got,
                expected=expected,
                cause=f"{cause} (missing: {missing}, extra: {extra})",
            )
    expect_raises(
        ValueError,
        Recorded("tensor_core_violations", [((), {})], records[-1:]),
        what="tensor_core_violations(model, torch.float64) must raise ValueError",
        cause="the exercise has no float64 rule: raise ValueError for dtypes other than fp16, bf16, float32 (TF32) and int8",
    )
    passed("tensor_core_violations finds misaligned Linear and Conv2d layers for every dtype")


def check_tensor_core_violations_hidden(tensor_core_violations) -> None:
    """Compare with the reference on further models."""
    tensor_core_violations = student(tensor_core_violations, "tensor_core_violations")
    ref = reference(ASSIGNMENT).tensor_core_violations
    builders = (_build_linear64, _build_transformer_layer, _build_nested)
    dtypes = (torch.float16, torch.bfloat16, torch.float32, torch.int8)
    cases = [(b, d) for b in builders for d in dtypes]
    records = tensor_core_violations.probe(_probe_violations, cases)
    for (builder, dtype), record in zip(cases, records):
        model = builder()
        label = f"tensor_core_violations({type(model).__name__}, {dtype})"
        got, expected = _replay("tensor_core_violations", record, label), ref(model, dtype)
        require(
            got == expected,
            label,
            yours=got,
            expected=expected,
            cause="every nn.Linear and nn.Conv2d in named_modules(), both dimensions, the dtype's multiple",
        )
    passed("tensor_core_violations agrees with the reference")


# --------------------------------------------------------------------------- pad_linear
@kernel_side
def _layer_10_5() -> nn.Linear:
    torch.manual_seed(10)
    return nn.Linear(10, 5)


@kernel_side
def _layer_16_3_no_bias() -> nn.Linear:
    torch.manual_seed(11)
    return nn.Linear(16, 3, bias=False)


@kernel_side
def _layer_bf16() -> nn.Linear:
    torch.manual_seed(12)
    return nn.Linear(50, 30).to(torch.bfloat16)


@kernel_side
def _layer_frozen() -> nn.Linear:
    torch.manual_seed(13)
    layer = nn.Linear(13, 7)
    layer.requires_grad_(False)
    return layer


@kernel_side
def _layer_meta_vocab() -> nn.Linear:
    return nn.Linear(1024, 50257, device="meta")


@kernel_side
def _layer_9_9() -> nn.Linear:
    torch.manual_seed(14)
    return nn.Linear(9, 9)


@kernel_side
def _layer_cuda_fp16() -> nn.Linear:
    torch.manual_seed(15)
    return nn.Linear(100, 50).to("cuda", torch.float16)


def _rounded(size: int, multiple: int) -> int:
    return math.ceil(size / multiple) * multiple


def _describe_padded(pad_linear, layer: nn.Linear, args: tuple, x: torch.Tensor) -> dict:
    """Call the student's pad_linear and describe the result as data (runs in a probe)."""
    new = pad_linear(layer, *args)
    info: dict = {"type": f"{type(new).__module__}.{type(new).__qualname__}"}
    info["is_linear"] = isinstance(new, nn.Linear)
    info["same_object"] = new is layer
    if not info["is_linear"]:
        return info
    weight, bias = new.weight, new.bias
    info.update(
        in_features=int(new.in_features),
        out_features=int(new.out_features),
        dtype=weight.dtype,
        device=str(weight.device),
        requires_grad=bool(weight.requires_grad),
        bias_requires_grad=None if bias is None else bool(bias.requires_grad),
        has_bias=bias is not None,
    )
    if weight.device.type != "meta":
        info["weight"] = weight.detach().cpu().clone()
        info["bias"] = None if bias is None else bias.detach().cpu().clone()
        padded = torch.zeros(x.shape[0], info["in_features"], dtype=layer.weight.dtype)
        width = min(x.shape[1], info["in_features"])
        padded[:, :width] = x[:, :width].to(layer.weight.dtype)
        with torch.no_grad():
            info["outputs"] = attempt(
                lambda: new(padded.to(layer.weight.device)).detach().cpu().float()
            )
    return info


def _probe_pad_linear(pad_linear, builder, args: tuple, x: torch.Tensor) -> dict:
    """Probe: build the layer, call the student's pad_linear on it, describe the new layer and
    the old one afterwards."""
    layer = builder()
    record = attempt(_describe_padded, pad_linear, layer, args, x)
    after = None if layer.weight.device.type == "meta" else layer.weight.detach().cpu().clone()
    return {"record": record, "old_weight_after": after}


def _check_padded(info: dict, old: nn.Linear, multiple: int, call: str, x, old_after) -> None:
    require(
        info["is_linear"],
        f"{call} must return an nn.Linear",
        yours=info["type"],
        expected="torch.nn.modules.linear.Linear",
        cause="build a new nn.Linear with the rounded sizes",
    )
    want_in, want_out = _rounded(old.in_features, multiple), _rounded(old.out_features, multiple)
    require(
        (info["in_features"], info["out_features"]) == (want_in, want_out),
        f"{call}: new in/out features",
        yours=(info["in_features"], info["out_features"]),
        expected=(want_in, want_out),
        cause="round both up to the next multiple",
    )
    require(
        info["dtype"] == old.weight.dtype,
        f"{call}: dtype",
        yours=info["dtype"],
        expected=old.weight.dtype,
        cause="create the new layer with dtype=layer.weight.dtype",
    )
    require(
        torch.device(info["device"]) == old.weight.device,
        f"{call}: device",
        yours=info["device"],
        expected=str(old.weight.device),
        cause="create the new layer with device=layer.weight.device; nn.Linear(...) alone lands on the CPU",
    )
    require(
        info["requires_grad"] == old.weight.requires_grad
        and info["bias_requires_grad"] in (None, old.weight.requires_grad),
        f"{call}: requires_grad",
        yours=(info["requires_grad"], info["bias_requires_grad"]),
        expected=old.weight.requires_grad,
        cause="copy requires_grad from the old layer (new.requires_grad_(layer.weight.requires_grad))",
    )
    require(
        info["has_bias"] == (old.bias is not None),
        f"{call}: bias",
        yours="a bias" if info["has_bias"] else "no bias",
        expected="a bias" if old.bias is not None else "no bias",
        cause="keep the bias (bias=layer.bias is not None) and copy its values",
    )
    require(
        not info["same_object"],
        f"{call} must return a new layer",
        yours="the layer it was given",
        expected="a new nn.Linear",
        cause="build a new layer; copy values into it",
    )
    if old.weight.device.type == "meta":
        return
    require(
        old_after is not None and torch.equal(old_after, old.weight.detach().cpu()),
        f"{call} must not change the old layer",
        yours="its weight changed",
        expected="unchanged",
        cause="copy values into the new layer; do not write into the old one",
    )
    y_new = _replay("the new layer", info["outputs"], f"{call}(...) applied to a zero-padded input")
    with torch.no_grad():
        y_old = old(x.to(old.weight.device, old.weight.dtype)).detach().cpu().float()
    tol = 1e-6 if old.weight.dtype == torch.float32 else 1e-2
    require(
        torch.allclose(y_new[:, : old.out_features], y_old, atol=tol, rtol=tol),
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


def _check_pad_case(pad_linear, builder, multiple: int | None, call: str | None = None) -> None:
    old = builder()
    args = () if multiple is None else (multiple,)
    multiple = 8 if multiple is None else multiple
    g = torch.Generator().manual_seed(old.in_features)
    x = torch.randn(5, old.in_features, generator=g)
    call = call or (
        f"pad_linear(Linear({old.in_features}, {old.out_features}, {old.weight.dtype}, "
        f"{old.weight.device.type}), {multiple})"
    )
    seen = pad_linear.probe(_probe_pad_linear, builder, args, x)
    try:
        info = _replay("pad_linear", seen["record"], call)
    except CheckFailed as err:
        if old.weight.device.type != "meta" or "meta" not in str(err):
            raise
        fail(
            "pad_linear on a layer on the 'meta' device (it has shapes but no data) failed",
            yours=str(err).splitlines()[0],
            expected="a new layer on the same device, values copied there",
            cause="create the new layer with device=layer.weight.device and copy on that device (no .cpu())",
        )
    _check_padded(info, old, multiple, call, x, seen["old_weight_after"])


def check_pad_linear(pad_linear) -> None:
    """Check sizes, values, zero padding, bias, dtype, device (a ``meta`` layer) and requires_grad.

    Raises:
        CheckFailed: on the first property that differs.
    """
    pad_linear = student(pad_linear, "pad_linear")
    for builder, multiple in (
        (_layer_10_5, 8),
        (_layer_16_3_no_bias, 8),
        (_layer_bf16, 16),
        (_layer_frozen, 4),
        (_layer_meta_vocab, 64),
    ):
        _check_pad_case(pad_linear, builder, multiple)
    _check_pad_case(pad_linear, _layer_9_9, None, "pad_linear(layer) (default multiple 8)")
    passed("pad_linear pads with zeros and keeps values, bias, dtype, device and requires_grad")


def check_pad_linear_cuda(pad_linear) -> None:
    """On a GPU: an fp16 layer on cuda:0 stays there, with the same outputs."""
    if not cuda_or_not_checked("pad_linear on a real GPU"):
        return
    pad_linear = student(pad_linear, "pad_linear")
    _check_pad_case(pad_linear, _layer_cuda_fp16, 8, "pad_linear(fp16 Linear(100, 50) on cuda:0)")
    passed("pad_linear keeps a GPU layer on the GPU")


# --------------------------------------------------------------------------- matmul_tflops
#: Sizes and dtypes the CPU check times on the simulated GPU. The float64 case runs on a
#: simulated consumer GPU (:data:`SIM_FP64_TFLOPS`), where the figure is not a whole number.
SIMULATED_CASES = [
    (4096, torch.bfloat16),
    (4095, torch.bfloat16),
    (1024, torch.float16),
    (512, torch.float64),
]
#: Float64 matmul rate of the simulated GPU, TFLOP/s: an RTX 4090's, whose FP32 rate is 82.6
#: TFLOP/s (NVIDIA Ada Lovelace architecture whitepaper, 2022) and whose FP64 units do 1/64 of
#: the FP32 results per clock (CUDA C++ Programming Guide, throughput of arithmetic
#: instructions, compute capability 8.9). A figure under 2 that no rounding can hide.
SIM_FP64_TFLOPS = 82.6 / 64
#: The size and dtype timed on this machine's CPU, when it has no GPU, against the reference
#: in the same process (:data:`CPU_ROUNDS` alternating rounds, each side's best): the
#: function's CPU path must run and time the matmul as well.
CPU_CASE = (256, torch.bfloat16)
CPU_ROUNDS = 5
#: How far the CPU figure may be from the reference's: wide, for a machine shared with other
#: work; a wrong timing (total of the repeats, seconds added instead of subtracted) or a
#: wrong unit is off by 10x or more.
CPU_BAND = (0.25, 4.0)


def _simulated_tflops(n: int, dtype: torch.dtype) -> float:
    """TFLOP/s of an n x n matmul of ``dtype`` on the simulated GPU (what the check expects)."""
    if dtype == torch.float64:
        return SIM_FP64_TFLOPS
    return SIM_MATMUL_TFLOPS[dtype] * (1.0 if n % 8 == 0 else SIM_MISALIGNED_FRACTION)


#: Host time the first matmul of each shape and dtype costs on the simulated GPU, ms: on a real
#: GPU the first one pays for cuBLAS's set-up and kernel selection (and the first of the process
#: for creating the cuBLAS handle), tens to hundreds of ms against well under 1 ms for a 4096
#: bf16 matmul. A timing without warm-up measures it.
FIRST_MATMUL_MS = 20.0


def _charge_first_matmuls(sim, ms: float) -> None:
    """Make the first matmul of each (shapes, dtype) on ``sim`` cost ``ms`` of host time before
    its launch (a wrapper on this simulation's ``matmul``)."""
    real, seen = sim.matmul, set()

    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        key = (tuple(a.shape), tuple(b.shape), a.dtype)
        if key not in seen:
            seen.add(key)
            sim.sleep_until(sim.now() + ms / 1000.0)  # set-up on the host, then the launch
        return real(a, b)

    sim.matmul = matmul


def _probe_matmul_tflops_simulated(matmul_tflops, cases: list) -> list:
    """Probe: call the student's function for each case on the simulated GPU (virtual clock),
    with every timer they may use reading the simulation's clock, and the first matmul of each
    shape costing :data:`FIRST_MATMUL_MS` more."""
    with (
        simulated_cuda(transfers=True, allow_real_gpu=True, virtual_time=True) as sim,
        sim.clocks_seen_by(matmul_tflops),
    ):
        _charge_first_matmuls(sim, FIRST_MATMUL_MS)
        rate = sim.matmul_tflops

        def matmul_tflops_of(dtype: torch.dtype, *dims: int) -> float:
            return SIM_FP64_TFLOPS if dtype == torch.float64 else rate(dtype, *dims)

        sim.matmul_tflops = matmul_tflops_of
        return [attempt(matmul_tflops, n, dtype) for n, dtype in cases]


def _probe_matmul_tflops(matmul_tflops, cases: list) -> list:
    """Probe: call the student's function for each case on this machine's device."""
    return [attempt(matmul_tflops, n, dtype) for n, dtype in cases]


def check_matmul_tflops(matmul_tflops) -> None:
    """On the simulated GPU's matmul model (virtual clock): exact TFLOP/s, aligned beats misaligned.
    The first matmul of each shape costs a one-time set-up (:data:`FIRST_MATMUL_MS`), which a
    warm-up keeps out of the figure. On a machine without a GPU, the figure on this CPU is also
    compared with the reference's (:func:`_cpu_tflops`): the function's CPU path must work.

    Raises:
        CheckFailed: off by more than 5%, a non-float, 4095 not slower than 4096, or the CPU
            figure outside :data:`CPU_BAND` of the reference's.
    """
    matmul_tflops = student(matmul_tflops, "matmul_tflops")
    records = matmul_tflops.probe(_probe_matmul_tflops_simulated, SIMULATED_CASES)
    results = {}
    for (n, dtype), record in zip(SIMULATED_CASES, records):
        got = _replay("matmul_tflops", record, f"matmul_tflops({n}, {dtype}) on the simulated GPU")
        results[(n, dtype)] = got
        peak = _simulated_tflops(n, dtype)
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
        elif abs(ratio * 1000 - 1) < 0.05:
            cause = "Event.elapsed_time() returns milliseconds: divide by 1000 for seconds"
        elif abs(ratio * 2**40 / 1e12 - 1) < 0.02:
            cause = "a TFLOP is 10^12 flops: divide by 1e12, not 2**40"
        elif ratio < 0.5:
            cause = (
                "warm up before timing: the first matmul of a shape pays a one-time set-up "
                f"(cuBLAS; {FIRST_MATMUL_MS:g} ms on the simulated GPU), then time several "
                "calls and take the median"
            )
        elif ratio > 3:
            cause = "the matmul was not finished when the clock stopped: synchronize before reading the time"
        elif abs(ratio / 2 - 1) < 0.05:
            cause = "a matmul of two n x n matrices is 2*n**3 flops, not 4*n**3"
        elif abs(ratio * 2 - 1) < 0.05:
            cause = "count 2*n**3 flops (a multiply and an add per term), not n**3"
        elif got == math.floor(got) and abs(got - peak) < 1:
            cause = "divide with / (true division): // rounds the TFLOP/s down to a whole number"
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
    if torch.cuda.is_available():
        passed("matmul_tflops measures the simulated GPU exactly, and 4096 beats 4095 in bf16")
        return
    mine, theirs = _cpu_tflops(matmul_tflops)
    passed(
        "matmul_tflops measures the simulated GPU exactly, and 4096 beats 4095 in bf16; on this "
        f"CPU {mine:.3g} TFLOP/s at {CPU_CASE[0]} {CPU_CASE[1]} (reference {theirs:.3g})"
    )


def _require_positive_tflops(value, label: str, cause: str) -> None:
    """A timing's figure must be a finite positive float (TFLOP/s)."""
    require(
        isinstance(value, float) and math.isfinite(value) and value > 0,
        f"{label} must return a positive float",
        yours=repr(value),
        expected="a float (TFLOP/s)",
        cause=cause,
    )


def _cpu_tflops(matmul_tflops) -> tuple[float, float]:
    """On a machine without a GPU: the student's figure for :data:`CPU_CASE` (their process)
    and the reference's (here), best of :data:`CPU_ROUNDS` alternating rounds each.

    Raises:
        CheckFailed: the function fails, returns no positive float, or is outside
            :data:`CPU_BAND` of the reference.
    """
    ref = reference(ASSIGNMENT).matmul_tflops
    n, dtype = CPU_CASE
    label = f"matmul_tflops({n}, {dtype}) on this CPU"
    seen, ref_seen = [], []
    for _ in range(CPU_ROUNDS):
        value = _replay(
            "matmul_tflops", matmul_tflops.probe(_probe_matmul_tflops, [CPU_CASE])[0], label
        )
        _require_positive_tflops(
            value,
            label,
            "without a GPU, time the matmul on the CPU (time.perf_counter() around each call)",
        )
        seen.append(value)
        ref_seen.append(ref(n, dtype))
    mine, theirs = max(seen), max(ref_seen)
    low, high = CPU_BAND
    require(
        low <= mine / theirs <= high,
        f"{label} / reference in the same process (best of {CPU_ROUNDS} rounds each)",
        yours=f"{mine:.3g} TFLOP/s (rounds {', '.join(f'{v:.3g}' for v in seen)})",
        expected=f"{theirs:.3g} TFLOP/s, within {low:g}x-{high:g}x",
        cause="on the CPU, time each call alone (t0 = time.perf_counter() before it, "
        "time.perf_counter() - t0 after) and take the median of the repeats",
    )
    return mine, theirs


#: The real-GPU check's cases: the first is compared with the reference; the second (aligned)
#: must beat the third (misaligned).
CUDA_CASES = [(4096, torch.bfloat16), (8192, torch.bfloat16), (8191, torch.bfloat16)]
#: Rounds of the real-GPU check. Each round times the student's function (in their process),
#: then the reference (here), so the two are measured close together, and each side's best
#: figure over the rounds counts. Other work on the GPU only ever slows a matmul down: under
#: autograde a ``_cuda`` cell has the GPU to itself (grader.grading.execute.GpuTurn), but a student
#: running the check in their own notebook may share the GPU, and clocks still rising after an
#: idle spell slow the first round. A wrong count of flops, GFLOP/s or a missing synchronize is
#: off in every round alike and still fails.
CUDA_ROUNDS = 3


def check_matmul_tflops_cuda(matmul_tflops) -> None:
    """On a real GPU: within [0.8, 1.25] of the reference at 4096 bf16; 8192 faster than 8191.

    The student's function runs in their process (a probe), the reference here, on the same
    GPU in the same grading job, in :data:`CUDA_ROUNDS` alternating rounds; each side's best
    round counts.
    """
    if not cuda_or_not_checked("matmul_tflops on real Tensor Cores"):
        return
    matmul_tflops = student(matmul_tflops, "matmul_tflops")
    ref = reference(ASSIGNMENT).matmul_tflops
    cases = list(CUDA_CASES)
    seen: list[list[float]] = [[] for _ in cases]
    ref_rounds = []
    for _ in range(CUDA_ROUNDS):
        records = matmul_tflops.probe(_probe_matmul_tflops, cases)
        for i, ((n, dtype), record) in enumerate(zip(cases, records)):
            label = f"matmul_tflops({n}, {dtype})"
            value = _replay("matmul_tflops", record, label)
            _require_positive_tflops(value, label, "return 2 * n**3 / seconds / 1e12 as a float")
            seen[i].append(value)
        ref_rounds.append(ref(*cases[0]))
    mine, aligned, misaligned = (max(values) for values in seen)
    theirs = max(ref_rounds)
    (n, dtype), (n_aligned, _), (n_misaligned, _) = cases
    ratio = mine / theirs
    # Reference figure: about 0.98-1.02 for the reference against itself.
    require(
        0.8 <= ratio <= 1.25,
        f"matmul_tflops({n}, {dtype}) / reference on this GPU (best of {CUDA_ROUNDS} rounds each)",
        yours=f"{mine:.0f} TFLOP/s (ratio {ratio:.2f}; rounds "
        f"{', '.join(f'{v:.0f}' for v in seen[0])})",
        expected=f"{theirs:.0f} TFLOP/s",
        cause="2*n**3 flops, synchronize, warm up, median of repeats",
    )
    require(
        aligned > misaligned,
        f"{n_aligned} must beat {n_misaligned} in {dtype} on this GPU",
        yours=f"{aligned:.0f} vs {misaligned:.0f} TFLOP/s",
        expected=f"{n_aligned} faster",
        cause="time each size the same way",
    )
    passed(
        f"matmul_tflops on this GPU: {mine:.0f} TFLOP/s at {n} (reference {theirs:.0f}); "
        f"{n_aligned}: {aligned:.0f}, {n_misaligned}: {misaligned:.0f}"
    )


# --------------------------------------------------------------------------- CASE_FINDINGS
def _probe_findings(case_findings) -> object:
    """Probe: CASE_FINDINGS as data: each value's type name, and its elements as strings when
    it is a set (frozensets included)."""
    if not isinstance(case_findings, dict):
        return {"type": type(case_findings).__name__}
    out = {}
    for key, value in case_findings.items():
        entry: dict = {"type": type(value).__name__}
        if isinstance(value, (set, frozenset)):
            entry["items"] = sorted(str(v) for v in value)
        out[str(key)] = entry
    return {"type": "dict", "entries": out}


def _findings(case_findings) -> dict[str, set[str]]:
    """The student's CASE_FINDINGS, checked for format (grading side)."""
    seen = case_findings.probe(_probe_findings)
    entries = seen.get("entries")
    require(
        entries is not None and set(entries) == set(CASES),
        "CASE_FINDINGS must map 'case1', 'case2', 'case3' to sets",
        yours=sorted(entries) if entries is not None else seen["type"],
        expected=sorted(CASES),
        cause="one entry per case",
    )
    if all(entries[c]["type"] == "NoneType" for c in CASES):
        raise not_attempted("CASE_FINDINGS")
    found = {}
    for case in CASES:
        entry = entries[case]
        require(
            "items" in entry,
            f"CASE_FINDINGS[{case!r}] must be a set",
            yours=entry["type"],
            expected="set",
            cause="use {'problem_a', 'problem_b'}",
        )
        unknown = sorted(set(entry["items"]) - set(PROBLEMS))
        require(
            not unknown,
            f"CASE_FINDINGS[{case!r}] names unknown problems",
            yours=unknown,
            expected=sorted(PROBLEMS),
            cause="use the problem names printed in the notebook",
        )
        found[case] = set(entry["items"])
    return found


def check_case_findings(case_findings) -> None:
    """Check CASE_FINDINGS maps case1..case3 to sets of problem names from PROBLEMS."""
    case_findings = student(case_findings, "CASE_FINDINGS")
    _findings(case_findings)
    passed("CASE_FINDINGS names known problems for every case")


def case_score(found: set[str], truth: set[str]) -> float:
    """Credit for one case: the problems found, less one for each listed problem the case
    does not have, as a share of the case's problems (0 at worst). Listing every problem
    scores 0, so guessing does not pay."""
    hits, wrong = len(found & truth), len(found - truth)
    return max(0.0, (hits - wrong) / len(truth))


def _case_feedback(case: str, found: set[str], truth: set[str]) -> str:
    hits, wrong, missing = found & truth, found - truth, truth - found
    parts = [f"{case}: {len(hits)} of {len(truth)} problems found"]
    if wrong:
        parts.append(
            f"{len(wrong)} problem(s) you listed {'is' if len(wrong) == 1 else 'are'} not in this "
            "code (each costs as much as a missed one)"
        )
    if missing:
        hints = sorted({_WHERE[p] for p in missing})
        parts.append(f"{len(missing)} missing: look at {' and at '.join(hints)}")
    return "; ".join(parts)


def check_case_findings_hidden(case_findings):
    """Compare with the reference findings, with partial credit per case.

    Returns:
        :class:`grader.checks.common.Partial` with the mean of the cases' credits (see
        :func:`case_score`) when not every case is right; under autograde the cell then scores
        that share of its points. The printed feedback says per case how many problems were
        found, how many listed ones are not there, and where to look for the missing ones.
    """
    case_findings = student(case_findings, "CASE_FINDINGS")
    found = _findings(case_findings)
    truth = reference(ASSIGNMENT).CASE_FINDINGS
    scores = {case: case_score(found[case], set(truth[case])) for case in CASES}
    if all(found[case] == set(truth[case]) for case in CASES):
        passed("CASE_FINDINGS agrees with the reference for every case")
        return None
    fraction = sum(scores.values()) / len(scores)
    print(f"CASE_FINDINGS: {fraction:.0%} of the points (partial credit per case)")
    for case in CASES:
        if found[case] != set(truth[case]):
            print("  " + _case_feedback(case, found[case], set(truth[case])))
    print(
        "  Tensor Cores need aligned shapes, a low-precision dtype (or TF32) and, for "
        "convolutions, channels_last; elementwise work is bound by memory, not math; and "
        "no speed-up helps a loop that feeds the model the wrong data."
    )
    return Partial(fraction)
