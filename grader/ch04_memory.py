"""Checks for 04_memory: training_memory_bytes, peak_memory_bytes, train_without_leak,
h2d_bandwidth.

``peak_memory_bytes`` and ``h2d_bandwidth`` are CUDA functions. On every machine they are
first checked on the simulated GPU of :mod:`grader.simulate`, whose caching allocator keeps
allocated, peak and reserved bytes the way PyTorch's does, and whose virtual clock makes
copy times exact; the ``_cuda`` checks compare with the reference on real hardware.
"""

from __future__ import annotations

import copy
import gc
import weakref

import torch
from torch import nn

from .common import call_student, cuda_or_not_checked, expect_raises, fail, passed, require
from .course import reference
from .simulate import simulated_cuda

ASSIGNMENT = "04_memory"
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
    model = _TiedModel()
    for optimizer, multiple in (("sgd", 0), ("sgd_momentum", 1), ("adam", 2), ("adamw", 2)):
        _require_bytes(
            call_student(training_memory_bytes, model, optimizer),
            _expected_bytes(model, multiple),
            f"training_memory_bytes(model, {optimizer!r})",
        )
    _require_bytes(
        call_student(training_memory_bytes, model),
        _expected_bytes(model, 2),
        "training_memory_bytes(model) (default: adam)",
    )
    expect_raises(
        ValueError,
        training_memory_bytes,
        model,
        "rmsprop",
        what="training_memory_bytes(model, 'rmsprop') must raise ValueError",
        cause="raise ValueError for any optimizer other than sgd, sgd_momentum, adam, adamw",
    )
    passed("training_memory_bytes counts bytes per part for every optimizer")


def check_training_memory_bytes_hidden(training_memory_bytes) -> None:
    """Compare with the reference on further models."""
    ref = reference(ASSIGNMENT).training_memory_bytes
    models = [
        nn.Linear(3, 5),
        nn.Sequential(
            nn.Conv2d(3, 8, 3),
            nn.BatchNorm2d(8),
            nn.Flatten(),
            nn.Linear(8, 2),
        ).to(torch.bfloat16),
        nn.TransformerEncoderLayer(32, 4, 64),
    ]
    for model in models:
        for optimizer in ("sgd", "sgd_momentum", "adam", "adamw"):
            _require_bytes(
                call_student(training_memory_bytes, model, optimizer),
                ref(model, optimizer),
                f"training_memory_bytes({type(model).__name__}, {optimizer!r})",
            )
    passed("training_memory_bytes agrees with the reference")


def check_training_memory_bytes_cuda(training_memory_bytes) -> None:
    """On a GPU: the predicted total matches memory_allocated after one Adam step within 5%."""
    if not cuda_or_not_checked("training_memory_bytes against memory_allocated on a real GPU"):
        return
    device = torch.device("cuda:0")
    torch.cuda.synchronize()
    warm = torch.randn(64, 64, device=device)
    (warm @ warm).sum().item()  # cuBLAS workspace allocated before the baseline
    del warm
    torch.cuda.empty_cache()
    baseline = torch.cuda.memory_allocated()
    model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(8)]).to(device)
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(16, 2048, device=device)
    model(x).square().mean().backward()
    opt.step()
    del x
    torch.cuda.synchronize()
    measured = torch.cuda.memory_allocated() - baseline
    predicted = call_student(training_memory_bytes, model, "adam")["total"]
    ratio = predicted / measured
    require(
        0.95 <= ratio <= 1.05,
        "predicted total / measured memory_allocated after one Adam step",
        yours=f"{predicted:,} bytes (ratio {ratio:.3f})",
        expected=f"{measured:,} bytes within 5%",
        cause=_CAUSES["optimizer_state"],
    )
    del model, opt
    passed(
        f"training_memory_bytes predicts this GPU's memory_allocated within {abs(ratio - 1):.1%}"
    )


# --------------------------------------------------------------------------- peak_memory_bytes
def check_peak_memory_bytes(peak_memory_bytes) -> None:
    """On the simulated allocator: 30 MB already held, an old 100 MB peak, fn peaking at 30 MB more.

    Raises:
        CheckFailed: the result includes the old peak, the baseline, or cached (reserved) memory.
    """
    with simulated_cuda(allow_real_gpu=True) as sim:
        held = sim.malloc(30 * MB)  # allocated before the call: the baseline
        sim.free(
            sim.malloc(100 * MB)
        )  # an earlier, larger peak; its memory stays reserved (cached)

        def fn():
            a = sim.malloc(10 * MB)
            b = sim.malloc(20 * MB)
            sim.free(a)
            sim.free(b)

        expected = sum(
            -(-n // 512) * 512 for n in (10 * MB, 20 * MB)
        )  # blocks round up to 512 bytes
        got = call_student(peak_memory_bytes, fn)
        sim.free(held)
    require(
        isinstance(got, int),
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
        else:
            cause = "use max_memory_allocated (bytes tensors use), not memory_reserved (what the caching allocator holds)"
        fail(
            "peak bytes allocated by fn above what was allocated before (simulated allocator)",
            yours=got,
            expected=expected,
            cause=cause,
        )
    passed("peak_memory_bytes resets the peak, subtracts the baseline and counts allocated bytes")


def check_peak_memory_bytes_cuda(peak_memory_bytes) -> None:
    """On a real GPU: equal to the reference (within 2 MiB) for a function allocating 30 MB at peak."""
    if not cuda_or_not_checked("peak_memory_bytes on a real GPU"):
        return
    held = torch.empty(30 * MB, dtype=torch.uint8, device="cuda")
    big = torch.empty(100 * MB, dtype=torch.uint8, device="cuda")
    del big

    def fn():
        a = torch.empty(10 * MB, dtype=torch.uint8, device="cuda")
        b = torch.empty(20 * MB, dtype=torch.uint8, device="cuda")
        del a, b

    mine, theirs = call_student(peak_memory_bytes, fn), reference(ASSIGNMENT).peak_memory_bytes(fn)
    del held
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
    batches = [(torch.randn(12, 8, generator=g), torch.randn(12, 1, generator=g)) for _ in range(6)]
    return model, batches


def check_train_without_leak(train_without_leak) -> None:
    """Check the mean loss, the trained parameters, and that no step's graph outlives the next step.

    Each loss passes through a probe whose lifetime is its step's autograd graph; when the
    loss function is called for step k, the graphs of steps k-2 and earlier must be gone.

    Raises:
        CheckFailed: a graph kept alive, a wrong mean, not a float, or parameters not trained.
    """
    model, batches = _training_setup()
    ref_model = copy.deepcopy(model)
    expected = reference(ASSIGNMENT).train_without_leak(
        ref_model, batches, nn.MSELoss(), torch.optim.SGD(ref_model.parameters(), lr=0.1)
    )
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

    got = call_student(
        train_without_leak, model, batches, probed_loss, torch.optim.SGD(model.parameters(), lr=0.1)
    )
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
        cause="average the per-step losses over the number of batches",
    )
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        require(
            torch.allclose(p, q, atol=1e-6),
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
SIM_LINK = {"h2d_gbps": 24.0, "pageable_gbps": 12.0, "pin_gbps": 6.0}


def check_h2d_bandwidth(h2d_bandwidth) -> None:
    """On the simulated link (virtual clock, exact times): pinned and pageable GB/s for 256 MB.

    Raises:
        CheckFailed: off the link's bandwidth by more than 5%, or pinned not faster.
    """
    nbytes = 256 * MB
    with simulated_cuda(transfers=True, allow_real_gpu=True, virtual_time=True, **SIM_LINK):
        pinned = call_student(h2d_bandwidth, nbytes, True)
        pageable = call_student(h2d_bandwidth, nbytes, False)
    for value, kind, link in (
        (pinned, "pinned", SIM_LINK["h2d_gbps"]),
        (pageable, "pageable", SIM_LINK["pageable_gbps"]),
    ):
        require(
            isinstance(value, float),
            f"h2d_bandwidth(256 MB, {kind}) must return a float (GB/s)",
            yours=f"{value!r}",
            expected="a float",
            cause="return nbytes / seconds / 1e9",
        )
        ratio = value / link
        if ratio > 1.05:
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
        cause="copy from host.pin_memory() when pinned=True",
    )
    passed(
        f"h2d_bandwidth measures the simulated link: pinned {pinned:.1f} GB/s, pageable {pageable:.1f} GB/s"
    )


def check_h2d_bandwidth_cuda(h2d_bandwidth) -> None:
    """On a real GPU: within [0.67, 1.5] of the reference in the same run, pinned > pageable."""
    if not cuda_or_not_checked("h2d_bandwidth on a real GPU"):
        return
    ref = reference(ASSIGNMENT).h2d_bandwidth
    nbytes = 256 * MB
    results = {}
    for pinned in (True, False):
        mine, theirs = call_student(h2d_bandwidth, nbytes, pinned), ref(nbytes, pinned)
        results[pinned] = mine
        ratio = mine / theirs
        require(
            0.67 <= ratio <= 1.5,
            f"h2d_bandwidth(256 MB, pinned={pinned}) / reference on this GPU",
            yours=f"{mine:.1f} GB/s (ratio {ratio:.2f})",
            expected=f"{theirs:.1f} GB/s",
            cause="synchronize before stopping the clock, time only the copy, and report 10^9 bytes/s",
        )
    require(
        results[True] > results[False],
        "pinned must beat pageable for 256 MB",
        yours=results,
        expected="pinned faster",
        cause="pin the source when pinned=True",
    )
    passed(
        f"h2d_bandwidth on this GPU: pinned {results[True]:.1f} GB/s, pageable {results[False]:.1f} GB/s"
    )
