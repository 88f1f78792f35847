"""Checks for 04_memory: training_memory_bytes, peak_memory_bytes, train_without_leak,
h2d_bandwidth.

``peak_memory_bytes`` and ``h2d_bandwidth`` are CUDA functions. On every machine they are
first checked on the simulated GPU of :mod:`grader.runtime.simulate`, whose caching allocator keeps
allocated, peak and reserved bytes the way PyTorch's does, and whose virtual clock makes
copy times exact; the ``_cuda`` checks compare with the reference on real hardware.

Each ``check_*`` reaches the student's code through a :class:`~grader.runtime.remote.Handle`
(:mod:`grader.runtime.remote`): the ``_probe_*`` functions below build what the student's function
needs (models, a simulated GPU, a probed loss) where that code lives and hand back plain data
(the calls' outcomes, what was seen); the expected values, every measurement the verdict rests
on that does not involve the student's code (memory of a real training step, the reference's
timings), every use of the reference and every comparison are made here, in the check.
"""

from __future__ import annotations

import gc
import weakref

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
from grader.runtime.remote import Recorded, attempt, student
from grader.runtime.simulate import simulated_cuda

ASSIGNMENT = "04_memory"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True
MB = 10**6


# --------------------------------------------------------------------------- training_memory_bytes
class _TiedModel(nn.Module):
    """Mixed dtypes, a frozen layer, tied weights and buffers: every trap of the exercise."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 16)
        self.body = nn.Linear(16, 16).to(torch.float16)
        self.frozen = nn.Linear(16, 16)
        self.frozen.requires_grad_(False)
        self.norm = nn.BatchNorm1d(16)  # buffers: running_mean, running_var, num_batches_tracked
        self.head = nn.Linear(16, 100, bias=False)
        self.head.weight = self.embed.weight  # tied: one tensor, two modules


def _conv_bf16() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3),
        nn.BatchNorm2d(8),
        nn.Flatten(),
        nn.Linear(8, 2),
    ).to(torch.bfloat16)


def _training_step_model(device: str | torch.device = "cpu") -> nn.Module:
    """The model whose real Adam step the CUDA check measures: 8 x Linear(2048, 2048)."""
    return nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(8)]).to(device)


#: The models the checks ask about, by name (built on both sides: only their shapes, dtypes,
#: sharing and requires_grad matter, not their random values).
_MODELS = {
    "tied": _TiedModel,
    "linear": lambda: nn.Linear(3, 5),
    "conv_bf16": _conv_bf16,
    "transformer_layer": lambda: nn.TransformerEncoderLayer(32, 4, 64),
    "training_step": _training_step_model,
}
_HIDDEN_MODELS = ("linear", "conv_bf16", "transformer_layer")
_OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")


def _probe_training_memory_bytes(training_memory_bytes, model: str, calls: list) -> list:
    """Probe: build the model named ``model`` and record training_memory_bytes(model, *args)
    for each ``args`` of ``calls``."""
    built = _MODELS[model]()
    return [attempt(training_memory_bytes, built, *args) for args in calls]


def _tmb_answers(training_memory_bytes, model: str, calls: list) -> Recorded:
    """The student's answers for ``model`` and each optimizer argument tuple of ``calls``,
    callable as ``answers(*args)``."""
    records = training_memory_bytes.probe(_probe_training_memory_bytes, model, calls)
    return Recorded("training_memory_bytes", [(tuple(a), {}) for a in calls], records)


def _expected_bytes(model: nn.Module, multiple: int) -> dict[str, int]:
    params = list(model.parameters())  # each shared parameter once
    parameters = sum(p.numel() * p.element_size() for p in params)
    gradients = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    state = multiple * gradients
    return {
        "parameters": parameters,
        "gradients": gradients,
        "optimizer_state": state,
        "total": parameters + gradients + state,
    }


_CAUSES = {
    "parameters": "count bytes (numel * element_size), each shared parameter once (model.parameters() does), and no buffers",
    "gradients": "gradients exist only for parameters with requires_grad=True, in the parameter's dtype",
    "optimizer_state": "SGD keeps nothing, SGD with momentum one buffer per trainable parameter, Adam/AdamW two (exp_avg, exp_avg_sq)",
    "total": "total = parameters + gradients + optimizer_state",
}


def _require_bytes(got, expected: dict[str, int], call: str) -> None:
    require(
        isinstance(got, dict) and set(got) == set(expected),
        f"{call} must return a dict with keys {sorted(expected)}",
        yours=got,
        expected=expected,
        cause="return {'parameters': ..., 'gradients': ..., 'optimizer_state': ..., 'total': ...}",
    )
    for key in ("parameters", "gradients", "optimizer_state", "total"):
        require(
            got[key] == expected[key] and isinstance(got[key], int),
            f"{call}[{key!r}] (bytes)",
            yours=got[key],
            expected=expected[key],
            cause=_CAUSES[key],
        )


def check_training_memory_bytes(training_memory_bytes) -> None:
    """Check bytes per part on a model with fp16 and fp32 layers, a frozen layer, tied weights
    and buffers, for every optimizer, and the ValueError for an unknown optimizer.

    Raises:
        CheckFailed: a part differs, or an unknown optimizer is accepted.
    """
    training_memory_bytes = student(training_memory_bytes, "training_memory_bytes")
    calls = [(opt,) for opt in _OPTIMIZERS] + [(), ("rmsprop",)]
    answers = _tmb_answers(training_memory_bytes, "tied", calls)
    model = _TiedModel()
    for optimizer, multiple in zip(_OPTIMIZERS, (0, 1, 2, 2)):
        call = f"training_memory_bytes(model, {optimizer!r})"
        _require_bytes(
            call_student(answers, optimizer, name=call), _expected_bytes(model, multiple), call
        )
    _require_bytes(
        call_student(answers, name="training_memory_bytes(model)"),
        _expected_bytes(model, 2),
        "training_memory_bytes(model) (default: adam)",
    )
    expect_raises(
        ValueError,
        answers,
        "rmsprop",
        what="training_memory_bytes(model, 'rmsprop') must raise ValueError",
        cause="raise ValueError for any optimizer other than sgd, sgd_momentum, adam, adamw",
    )
    passed("training_memory_bytes counts bytes per part for every optimizer")


def check_training_memory_bytes_hidden(training_memory_bytes) -> None:
    """Compare with the reference on further models."""
    training_memory_bytes = student(training_memory_bytes, "training_memory_bytes")
    ref = reference(ASSIGNMENT).training_memory_bytes
    calls = [(opt,) for opt in _OPTIMIZERS]
    for name in _HIDDEN_MODELS:
        answers = _tmb_answers(training_memory_bytes, name, calls)
        model = _MODELS[name]()
        for optimizer in _OPTIMIZERS:
            call = f"training_memory_bytes({type(model).__name__}, {optimizer!r})"
            _require_bytes(call_student(answers, optimizer, name=call), ref(model, optimizer), call)
    passed("training_memory_bytes agrees with the reference")


def warm_up_training_step(device: str | torch.device) -> None:
    """One small forward, backward and Adam step on ``device``, of the same kinds of operations
    as the measured step, then everything it made is freed.

    Some memory is allocated once, on first use, and kept: the cuBLAS workspace of each thread
    that runs a matmul (the calling thread's in the forward pass, the autograd engine's device
    thread's in the backward pass: 32 MiB each on an H100) and other lazily created state. It
    counts in ``memory_allocated``, so it must exist before the baseline of a measurement.
    """
    layer = nn.Linear(2048, 2048).to(device)
    optimizer = torch.optim.Adam(layer.parameters())
    layer(torch.randn(16, 2048, device=device)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del layer, optimizer


def measure_training_step_bytes(device: str | torch.device = "cuda:0") -> int:
    """Bytes that one Adam training step of :func:`_training_step_model` leaves allocated on
    ``device`` (``torch.cuda.memory_allocated`` after the step, minus before the model was
    built), after :func:`warm_up_training_step` so that one-time allocations are in the
    baseline. Runs in the grading process: the student's code cannot reach it."""
    warm_up_training_step(device)
    torch.cuda.synchronize(device)
    baseline = torch.cuda.memory_allocated(device)
    model = _training_step_model(device)
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(16, 2048, device=device)
    model(x).square().mean().backward()
    optimizer.step()
    del x
    torch.cuda.synchronize(device)
    measured = torch.cuda.memory_allocated(device) - baseline
    del model, optimizer
    return int(measured)


def check_training_memory_bytes_cuda(training_memory_bytes) -> None:
    """On a GPU: the predicted total matches memory_allocated after one Adam step within 5%.

    The student's function gets a model of the measured architecture in their process; the step
    is measured here (:func:`measure_training_step_bytes`).
    """
    if not cuda_or_not_checked("training_memory_bytes against memory_allocated on a real GPU"):
        return
    training_memory_bytes = student(training_memory_bytes, "training_memory_bytes")
    answers = _tmb_answers(training_memory_bytes, "training_step", [("adam",)])
    call = "training_memory_bytes(8 x Linear(2048, 2048), 'adam')"
    got = call_student(answers, "adam", name=call)
    require(
        isinstance(got, dict) and isinstance(got.get("total"), int),
        f"{call} must return a dict with an int 'total'",
        yours=got,
        expected="{'parameters': ..., 'gradients': ..., 'optimizer_state': ..., 'total': ...}",
        cause=_CAUSES["total"],
    )
    predicted = got["total"]
    measured = measure_training_step_bytes("cuda:0")
    ratio = predicted / measured
    require(
        0.95 <= ratio <= 1.05,
        "predicted total / measured memory_allocated after one Adam step",
        yours=f"{predicted:,} bytes (ratio {ratio:.3f})",
        expected=f"{measured:,} bytes within 5%",
        cause=_CAUSES["optimizer_state"],
    )
    passed(
        f"training_memory_bytes predicts this GPU's memory_allocated within {abs(ratio - 1):.1%}"
    )


# --------------------------------------------------------------------------- peak_memory_bytes
#: Blocks of the simulated allocator round up to 512 bytes.
_PEAK_EXPECTED = sum(-(-n // 512) * 512 for n in (10 * MB, 20 * MB))
#: The part of it that fn of the checks still holds when it returns.
_PEAK_KEPT = 10 * MB


def _probe_peak_memory_bytes(peak_memory_bytes) -> dict:
    """Probe: on the simulated allocator, 30 MB held, an earlier 100 MB peak (freed, still
    reserved), then peak_memory_bytes(fn) for an fn that allocates 10 + 20 MB, frees the 20 MB
    and keeps the 10 MB (as a training step keeps its gradients) until after the call: a
    baseline read after fn returns would hide that part of the peak."""
    with simulated_cuda(allow_real_gpu=True) as sim:
        held = sim.malloc(30 * MB)  # allocated before the call: the baseline
        sim.free(sim.malloc(100 * MB))  # an earlier, larger peak; its memory stays reserved
        kept: list[int] = []

        def fn():
            a = sim.malloc(10 * MB)
            b = sim.malloc(20 * MB)
            sim.free(b)
            kept.append(a)  # still allocated when fn returns

        record = attempt(peak_memory_bytes, fn)
        for handle in kept:
            sim.free(handle)
        sim.free(held)
    return record


def check_peak_memory_bytes(peak_memory_bytes) -> None:
    """On the simulated allocator: 30 MB already held, an old 100 MB peak, fn peaking at 30 MB more
    and returning with 10 MB of it still allocated; on a machine without a GPU, also the
    RuntimeError the exercise asks for there.

    Raises:
        CheckFailed: the result includes the old peak, the baseline, or cached (reserved) memory;
            or, without CUDA, no RuntimeError.
    """
    peak_memory_bytes = student(peak_memory_bytes, "peak_memory_bytes")
    record = peak_memory_bytes.probe(_probe_peak_memory_bytes)
    got = call_student(
        Recorded("peak_memory_bytes", [((), {})], [record]), name="peak_memory_bytes(fn)"
    )
    expected = _PEAK_EXPECTED
    require(
        isinstance(got, int) and not isinstance(got, bool),
        "peak_memory_bytes must return an int (bytes)",
        yours=f"{got!r} ({type(got).__name__})",
        expected="an int",
        cause="subtract two byte counts",
    )
    if got != expected:
        if got >= 100 * MB:
            cause = "reset the peak first: torch.cuda.reset_peak_memory_stats() (an earlier, larger peak is still recorded)"
        elif got >= 60 * MB:
            cause = "subtract the baseline: memory_allocated() before fn, or memory already held is counted"
        elif 0 < got < MB:
            cause = "return bytes: do not convert to MiB (/ 2**20) or MB (/ 10**6)"
        elif abs(got - (expected - _PEAK_KEPT)) <= MB:
            cause = (
                "read the baseline (memory_allocated()) before calling fn: fn still holds 10 MB "
                "when it returns, so a baseline read afterwards hides that part of its peak"
            )
        else:
            cause = "use max_memory_allocated (bytes tensors use), not memory_reserved (what the caching allocator holds)"
        fail(
            "peak bytes allocated by fn above what was allocated before; fn allocates 10 MB and "
            "20 MB, frees the 20 MB and returns holding the 10 MB (simulated allocator)",
            yours=got,
            expected=expected,
            cause=cause,
        )
    if not torch.cuda.is_available():  # the exercise asks for a RuntimeError without CUDA
        record = peak_memory_bytes.probe(_probe_peak_without_cuda)
        expect_raises(
            RuntimeError,
            Recorded("peak_memory_bytes", [((), {})], [record]),
            what="peak_memory_bytes(fn) on this machine, which has no CUDA GPU, must raise RuntimeError",
            cause="check torch.cuda.is_available() first and raise RuntimeError: without CUDA "
            "there is no GPU memory to measure (torch.cuda.memory_allocated() just returns 0)",
        )
    passed("peak_memory_bytes resets the peak, subtracts the baseline and counts allocated bytes")


def _do_nothing() -> None:
    """fn for the check without CUDA."""


def _probe_peak_without_cuda(peak_memory_bytes) -> dict:
    """Probe: peak_memory_bytes(fn) as it is, on a machine without a CUDA GPU."""
    return attempt(peak_memory_bytes, _do_nothing)


def _peak_scenario(peak_memory_bytes) -> dict:
    """30 MB held and an earlier 100 MB peak, then peak_memory_bytes(fn) recorded for an fn that
    allocates 10 MB, then 20 MB more, frees the 20 MB and returns holding the 10 MB (run by the
    probe for the student's function, and by the check for the reference)."""
    held = torch.empty(30 * MB, dtype=torch.uint8, device="cuda")
    big = torch.empty(100 * MB, dtype=torch.uint8, device="cuda")
    del big
    kept: list[torch.Tensor] = []

    def fn() -> None:
        a = torch.empty(10 * MB, dtype=torch.uint8, device="cuda")
        b = torch.empty(20 * MB, dtype=torch.uint8, device="cuda")
        del b
        kept.append(a)  # still allocated when fn returns

    try:
        return attempt(peak_memory_bytes, fn)
    finally:
        kept.clear()
        del held


def _probe_peak_memory_bytes_cuda(peak_memory_bytes) -> dict:
    """Probe: :func:`_peak_scenario` with the student's function, on the real GPU."""
    return _peak_scenario(peak_memory_bytes)


def check_peak_memory_bytes_cuda(peak_memory_bytes) -> None:
    """On a real GPU: equal to the reference (within 2 MiB) for a function allocating 30 MB at
    peak; the reference runs the same scenario here, in the grading process."""
    if not cuda_or_not_checked("peak_memory_bytes on a real GPU"):
        return
    peak_memory_bytes = student(peak_memory_bytes, "peak_memory_bytes")
    record = peak_memory_bytes.probe(_probe_peak_memory_bytes_cuda)
    mine = call_student(
        Recorded("peak_memory_bytes", [((), {})], [record]), name="peak_memory_bytes(fn)"
    )
    require(
        isinstance(mine, int) and not isinstance(mine, bool),
        "peak_memory_bytes must return an int (bytes)",
        yours=f"{mine!r} ({type(mine).__name__})",
        expected="an int",
        cause="subtract two byte counts",
    )
    ref_record = _peak_scenario(reference(ASSIGNMENT).peak_memory_bytes)
    theirs = call_student(
        Recorded("the reference's peak_memory_bytes", [((), {})], [ref_record]),
        name="reference peak_memory_bytes(fn)",
    )
    require(
        abs(mine - theirs) <= 2 * 2**20,
        "peak_memory_bytes on this GPU",
        yours=mine,
        expected=theirs,
        cause="reset_peak_memory_stats, a baseline from memory_allocated, and max_memory_allocated",
    )
    passed(f"peak_memory_bytes matches the reference on this GPU ({mine:,} bytes)")


# --------------------------------------------------------------------------- train_without_leak
class _Token:
    """Lives exactly as long as the autograd graph of one step (held by a probe node)."""


class _GraphProbe(torch.autograd.Function):
    @staticmethod
    def forward(ctx, loss, token):
        ctx.token = token
        return loss.view_as(loss)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _training_setup():
    torch.manual_seed(4)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    g = torch.Generator().manual_seed(5)
    # The last batch is short (a dataset that no batch size divides): the mean over batches
    # counts it once, so a mean weighted by samples differs.
    batches = [
        (torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g))
        for n in (12, 12, 12, 12, 12, 5)
    ]
    return model, batches


def _probe_train_without_leak(train_without_leak) -> dict:
    """Probe: train with a loss function whose every step's graph holds a token, and note, when
    step k's loss is computed, which earlier steps' graphs (k-2 and before) are still alive.
    Returns the call's outcome, those (old step, step) pairs, and the trained parameters."""
    model, batches = _training_setup()
    graphs: list[weakref.ref] = []
    leaks: list[tuple[int, int]] = []
    mse = nn.MSELoss()

    def probed_loss(output, target):
        step = len(graphs)
        gc.collect()
        leaks.extend((old, step) for old, ref in enumerate(graphs[:-1]) if ref() is not None)
        token = _Token()
        graphs.append(weakref.ref(token))
        return _GraphProbe.apply(mse(output, target), token)

    record = attempt(
        train_without_leak, model, batches, probed_loss, torch.optim.SGD(model.parameters(), lr=0.1)
    )
    params = {name: p.detach().clone() for name, p in model.named_parameters()}
    return {"record": record, "leaks": leaks, "params": params}


def check_train_without_leak(train_without_leak) -> None:
    """Check the mean loss, the trained parameters, and that no step's graph outlives the next step.

    Each loss passes through a probe whose lifetime is its step's autograd graph; when the
    loss function is called for step k, the graphs of steps k-2 and earlier must be gone.

    Raises:
        CheckFailed: a graph kept alive, a wrong mean, not a float, or parameters not trained.
    """
    train_without_leak = student(train_without_leak, "train_without_leak")
    seen = train_without_leak.probe(_probe_train_without_leak)
    ref_model, batches = _training_setup()
    expected = reference(ASSIGNMENT).train_without_leak(
        ref_model, batches, nn.MSELoss(), torch.optim.SGD(ref_model.parameters(), lr=0.1)
    )
    got = call_student(
        Recorded("train_without_leak", [((), {})], [seen["record"]]),
        name="train_without_leak(model, batches, loss_fn, optimizer)",
    )
    leaks = seen["leaks"]
    if leaks:
        old, step = leaks[0]
        fail(
            "an autograd graph stayed alive after its step",
            yours=f"the graph of step {old} was still alive at step {step} ({len(leaks)} such cases)",
            expected="each step's graph freed once the step is over",
            cause="`total += loss` chains every step's graph to `total`: accumulate loss.detach() "
            "(or loss.item()) instead",
        )
    require(
        isinstance(got, float),
        "train_without_leak must return a Python float",
        yours=f"{got!r} ({type(got).__name__})",
        expected="a float",
        cause="call .item() (once) on the accumulated tensor at the end",
    )
    require(
        abs(got - expected) <= 1e-5 * max(1.0, abs(expected)),
        "mean training loss",
        yours=got,
        expected=expected,
        cause="average the per-step losses over the number of batches (each batch once, "
        "whatever its size: not weighted by samples)",
    )
    params = seen["params"]
    for name, q in ref_model.named_parameters():
        p = params.get(name)
        require(
            isinstance(p, torch.Tensor) and p.shape == q.shape and torch.allclose(p, q, atol=1e-6),
            f"parameter {name} after training",
            yours="different values",
            expected="the same as the reference's after the same steps",
            cause="each step: optimizer.zero_grad(), loss.backward(), optimizer.step()",
        )
    passed(
        "train_without_leak trains, returns the mean loss and keeps no graph alive between steps"
    )


# --------------------------------------------------------------------------- h2d_bandwidth
#: Simulated link: pinned 24 GB/s (about PCIe Gen4 x16 in practice), pageable 12 GB/s,
#: pinning (page-locking and copying) 6 GB/s. Illustrative values, not measurements.
#: The simulated link of the h2d_bandwidth checks: GB/s from pinned and pageable memory, the rate
#: of pinning, and a first copy of each kind 20 ms slower (a 256 MB copy takes 10.7 ms pinned, so
#: a timing without a warm-up copy reads about a third of the bandwidth).
SIM_LINK = {"h2d_gbps": 24.0, "pageable_gbps": 12.0, "pin_gbps": 6.0, "first_copy_ms": 20.0}
#: The copy size of both h2d_bandwidth checks.
H2D_BYTES = 256 * MB
#: Rounds of the CUDA check. Each round measures the student's function (in their process), then
#: the reference (here), so the two are taken close together, and each side's best figure over
#: the rounds counts. Other work on the machine only ever slows a copy down: under autograde a
#: ``_cuda`` cell has the GPU to itself (grader.grading.execute.GpuTurn), but the host's CPUs and
#: memory and other processes of the machine are not locked, and a student running the check in
#: their own notebook may share the GPU; a round of either side can then be halved, and an answer
#: timed with ``time.perf_counter`` around ``synchronize`` (correct too) also counts the time its
#: thread waits for a CPU (a 256 MB pinned copy takes 4.6 ms on the H200). The check takes
#: :data:`H2D_ROUNDS` rounds, and more, up to :data:`H2D_MAX_ROUNDS`, until the best figures
#: agree. A wrong answer (no synchronize, pinning timed, GiB, bits) is off in every round alike and
#: still fails, after all the rounds.
H2D_ROUNDS = 3
H2D_MAX_ROUNDS = 8
#: Bounds of the student's best figure / the reference's, pinned. A copy from pinned memory is a
#: DMA transfer: 55.2 GB/s at 256 MB on the H200 (images/recorded_figures.json), the same for
#: every correct way of timing it.
H2D_PINNED_RATIO = (0.67, 1.5)
#: The same, pageable. A pageable copy goes through the CPU (the driver copies it into pinned
#: staging buffers), so its speed is the host's memcpy: 7.9 GB/s at 256 MB on the H200 against
#: 12.5 at 16 MB and 11.3 at 64 MB (recorded figures, from buffers filled with torch.randn), where
#: the source is still in the CPU's caches. The reference copies from torch.empty, never written,
#: whose pages are all the kernel's one zero page, read from cache at about the 16 MB speed; an
#: answer that fills its buffer (torch.zeros, randn) reads 256 MB from DRAM, 0.63 times as fast
#: (7.9 / 12.5). The lower bound is the pinned one times 0.63; a wrong answer is off by a factor
#: of 4 or more on this side (float32 elements: 0.25, bits: 8), and the pinned side sees the
#: others.
H2D_PAGEABLE_RATIO = (0.42, 1.5)


def _probe_h2d_bandwidth(h2d_bandwidth, nbytes: int) -> dict:
    """Probe: h2d_bandwidth(nbytes, True) and (nbytes, False) on the simulated link (virtual
    clock: exact times)."""
    with simulated_cuda(transfers=True, allow_real_gpu=True, virtual_time=True, **SIM_LINK):
        return {
            "pinned": attempt(h2d_bandwidth, nbytes, True),
            "pageable": attempt(h2d_bandwidth, nbytes, False),
        }


def _bandwidths(seen: dict) -> dict[bool, float]:
    """The recorded GB/s of each kind of copy (pinned True/False), required to be floats."""
    out = {}
    for pinned in (True, False):
        value = call_student(
            Recorded("h2d_bandwidth", [((), {})], [seen["pinned" if pinned else "pageable"]]),
            name=f"h2d_bandwidth(256 MB, pinned={pinned})",
        )
        require(
            isinstance(value, float),
            f"h2d_bandwidth(256 MB, pinned={pinned}) must return a float (GB/s)",
            yours=f"{value!r}",
            expected="a float",
            cause="return nbytes / seconds / 1e9",
        )
        out[pinned] = value
    return out


def check_h2d_bandwidth(h2d_bandwidth) -> None:
    """On the simulated link (virtual clock, exact times): pinned and pageable GB/s for 256 MB.

    Raises:
        CheckFailed: off the link's bandwidth by more than 5%, or pinned not faster.
    """
    h2d_bandwidth = student(h2d_bandwidth, "h2d_bandwidth")
    results = _bandwidths(h2d_bandwidth.probe(_probe_h2d_bandwidth, H2D_BYTES))
    pinned, pageable = results[True], results[False]
    for value, kind, link in (
        (pinned, "pinned", SIM_LINK["h2d_gbps"]),
        (pageable, "pageable", SIM_LINK["pageable_gbps"]),
    ):
        ratio = value / link
        copy_ms = H2D_BYTES / (link * 1e9) * 1000.0
        cold = copy_ms / (copy_ms + SIM_LINK["first_copy_ms"])  # what a timed first copy reads
        if abs(ratio - cold) <= 0.03:
            cause = (
                "warm up first: copy once untimed, then time a copy (the module-02 rules); the "
                f"first copy of each kind pays a one-time cost ({SIM_LINK['first_copy_ms']:g} ms "
                "on this link, as a real GPU's first copies set up the transfer path)"
            )
        elif 7.6 <= ratio <= 8.4:
            cause = "GB/s counts bytes: do not multiply by 8 (that gives gigabits per second)"
        elif 0.24 <= ratio <= 0.26 or (
            kind == "pinned" and abs(ratio - SIM_LINK["pageable_gbps"] / (4 * link)) <= 0.01 * ratio
        ):
            cause = (
                "you copied 4 bytes per counted byte: torch.empty(nbytes) makes nbytes float32 "
                "elements; allocate the host tensor and the device buffer with dtype=torch.uint8 "
                "(a copy between dtypes converts on the CPU into a new pageable tensor first, "
                "so even a pinned source then copies at the pageable rate)"
            )
        elif ratio > 1.05:
            cause = "the copy was not finished when the clock stopped: synchronize (torch.cuda.synchronize() or end_event.synchronize()) before reading the time"
        elif 0.9 < ratio < 0.95:
            cause = "GB/s means 10^9 bytes per second, not GiB/s (2^30)"
        else:
            cause = "time only the copy: pin the source and allocate the destination before starting the clock"
        require(
            0.95 <= ratio <= 1.05,
            f"h2d_bandwidth(256 MB, pinned={kind == 'pinned'}) on a simulated {link:g} GB/s link",
            yours=f"{value:.2f} GB/s",
            expected=f"{link:g} GB/s",
            cause=cause,
        )
    require(
        pinned > pageable,
        "pinned copies must beat pageable ones",
        yours=f"pinned {pinned:.1f}, pageable {pageable:.1f}",
        expected="pinned faster",
        cause="copy from pinned memory when pinned=True (host.pin_memory(), or pin_memory=True "
        "when creating it)",
    )
    passed(
        f"h2d_bandwidth measures the simulated link: pinned {pinned:.1f} GB/s, pageable {pageable:.1f} GB/s"
    )


def _probe_h2d_bandwidth_cuda(h2d_bandwidth, nbytes: int) -> dict:
    """Probe: h2d_bandwidth(nbytes, True) and (nbytes, False) on the real GPU."""
    torch.cuda.synchronize()
    return {
        "pinned": attempt(h2d_bandwidth, nbytes, True),
        "pageable": attempt(h2d_bandwidth, nbytes, False),
    }


def _h2d_cuda_problem(rounds: dict, ref_rounds: dict) -> dict | None:
    """The first requirement the best figures so far miss (:func:`fail`'s arguments), or None."""
    best = {pinned: max(values) for pinned, values in rounds.items()}
    for pinned in (True, False):
        mine, theirs = best[pinned], max(ref_rounds[pinned])
        ratio = mine / theirs
        low, high = H2D_PINNED_RATIO if pinned else H2D_PAGEABLE_RATIO
        if not low <= ratio <= high:
            return {
                "what": f"h2d_bandwidth(256 MB, pinned={pinned}) / reference on this GPU (best "
                f"of {len(rounds[pinned])} rounds each; accepted: {low:g} to {high:g})",
                "yours": f"{mine:.1f} GB/s (ratio {ratio:.2f}; rounds "
                f"{', '.join(f'{v:.1f}' for v in rounds[pinned])})",
                "expected": f"{theirs:.1f} GB/s",
                "cause": "synchronize before stopping the clock, time only the copy, and report "
                "10^9 bytes/s",
            }
    if not best[True] > best[False]:
        return {
            "what": "pinned must beat pageable for 256 MB",
            "yours": best,
            "expected": "pinned faster",
            "cause": "pin the source when pinned=True",
        }
    return None


def check_h2d_bandwidth_cuda(h2d_bandwidth) -> None:
    """On a real GPU: each side's best figure against the reference's in the same run
    (:data:`H2D_PINNED_RATIO`, :data:`H2D_PAGEABLE_RATIO`), pinned > pageable.

    The student's function is measured in their process, the reference here, on the same GPU
    in the same grading job, in alternating rounds: :data:`H2D_ROUNDS`, and more up to
    :data:`H2D_MAX_ROUNDS` while the best figures disagree (work beside this job can only slow
    a round down).
    """
    if not cuda_or_not_checked("h2d_bandwidth on a real GPU"):
        return
    h2d_bandwidth = student(h2d_bandwidth, "h2d_bandwidth")
    ref = reference(ASSIGNMENT).h2d_bandwidth
    rounds: dict[bool, list[float]] = {True: [], False: []}
    ref_rounds: dict[bool, list[float]] = {True: [], False: []}
    problem = None
    for done in range(1, H2D_MAX_ROUNDS + 1):
        results = _bandwidths(h2d_bandwidth.probe(_probe_h2d_bandwidth_cuda, H2D_BYTES))
        torch.cuda.synchronize()
        for pinned in (True, False):
            rounds[pinned].append(results[pinned])
            ref_rounds[pinned].append(ref(H2D_BYTES, pinned))
        problem = _h2d_cuda_problem(rounds, ref_rounds)
        if done >= H2D_ROUNDS and problem is None:
            break
    if problem is not None:
        fail(**problem)
    best = {pinned: max(values) for pinned, values in rounds.items()}
    passed(
        f"h2d_bandwidth on this GPU: pinned {best[True]:.1f} GB/s, pageable {best[False]:.1f} GB/s"
    )
