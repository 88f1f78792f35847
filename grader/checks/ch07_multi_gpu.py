"""Checks for 07_multi_gpu: average_gradients, shard_indices, ddp_train, split_model.

Everything graded runs on the CPU with the gloo backend, in real separate processes
(:mod:`grader.runtime.distributed`: no fixed port, a deadline on every run, ranks forked only where
that is safe). ``split_model`` is checked on real devices (``["cpu", "cpu"]``, and
``["cuda:0", "cpu"]`` on a GPU) and, on every machine, on *virtual* devices
(:class:`VirtualDevices`): CPU tensors labelled ``cuda:0``, ``cuda:1``, ... that follow CUDA's
placement rules, so an input left on the wrong device fails here as it does on a multi-GPU
machine.

The checks reach the student's code through :mod:`grader.runtime.remote`: the ranks that call the
student's function, the launches of the script the notebook wrote and the forward and backward
passes of the split model all run in the student's process (the ``_probe_*`` functions), and
hand back plain data (gradients, trained weights, outputs, devices). The full-batch gradients,
single-process training and the unsplit model they are compared with are computed here.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import re
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.data import DistributedSampler

from grader.checks.common import (
    call_student,
    cuda_or_not_checked,
    expect_raises,
    fail,
    not_attempted,
    passed,
    require,
)
from grader.runtime import handover
from grader.runtime.course import reference
from grader.runtime.distributed import RanksFailed, run_ranks, run_torchrun, spawn_script
from grader.runtime.remote import Recorded, attempt, attempt_all, outcome, run, student

ASSIGNMENT = "07_multi_gpu"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True

#: How a rank's traceback ends when the exercise's stub raised (a bare NotImplementedError).
_STUB = re.compile(r"raise NotImplementedError\(\)|^NotImplementedError\s*$", re.MULTILINE)


def _raise_if_unsolved(text: str, label: str) -> None:
    """A rank stopped at the stub of an unsolved exercise: report it as not attempted."""
    if _STUB.search(text):
        raise not_attempted(label) from None


def _ranks_failed(what: str, text: str, label: str) -> None:
    _raise_if_unsolved(text, label)
    fail(
        what,
        yours=text[-1500:],
        expected="every rank finishes without error",
        cause="read the rank's traceback above; every rank must call the same collectives",
    )


# --------------------------------------------------------------------------- average_gradients
class _WithUnused(nn.Module):
    """An MLP plus a layer that forward never uses: its parameters get no gradient. The unused
    layer comes first in ``parameters()``, so a loop that stops at the first parameter without
    a gradient averages nothing."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Linear(4, 4)
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))

    def forward(self, x):
        return self.body(x)


def _grad_data(seed: int, n: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=g), torch.randn(n, 2, generator=g)


def _rank_gradients(rank, world_size, average_gradients, state, x, y):
    """One rank: the loss of this rank's slice of the batch, backward, then the student's
    ``average_gradients``; returns the gradients (None where a parameter has none)."""
    model = _WithUnused()
    model.load_state_dict(state)
    per_rank = len(x) // world_size
    part = slice(rank * per_rank, (rank + 1) * per_rank)
    F.mse_loss(model(x[part]), y[part]).backward()
    average_gradients(model)
    return {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}


def _probe_average_gradients(average_gradients, world_size: int, state, x, y) -> dict:
    """Probe: start ``world_size`` gloo ranks from the student's process, each calling the
    student's function after the backward of its slice of ``(x, y)``; hand back each rank's
    gradients, or the launcher's report of a failed rank. Ranks are forked where that is safe
    and spawned elsewhere, the function then rebuilt from its notebook source
    (:func:`grader.runtime.distributed.run_ranks`)."""
    try:
        results = run_ranks(
            _rank_gradients, world_size, average_gradients, state, x, y, timeout_s=120
        )
    except Exception as exc:  # noqa: BLE001 - a rank failed, or the function could not be sent
        return {
            "failed": str(exc) if isinstance(exc, RanksFailed) else f"{type(exc).__name__}: {exc}"
        }
    return {"gradients": results}


def _full_batch_gradients(state, x, y) -> dict:
    model = _WithUnused()
    model.load_state_dict(state)
    F.mse_loss(model(x), y).backward()
    return {n: p.grad for n, p in model.named_parameters()}


def _compare_gradients(average_gradients, world_size: int, seed: int) -> None:
    torch.manual_seed(seed)
    state = _WithUnused().state_dict()
    x, y = _grad_data(seed, 8 * world_size)
    expected = _full_batch_gradients(state, x, y)
    seen = average_gradients.probe(_probe_average_gradients, world_size, state, x, y)
    if "failed" in seen:
        _ranks_failed(
            f"average_gradients in {world_size} gloo processes", seen["failed"], "average_gradients"
        )
    results = seen["gradients"]
    require(
        isinstance(results, list) and len(results) == world_size,
        f"results of {world_size} ranks",
        yours=type(results).__name__,
        expected=f"{world_size} dicts of gradients",
        cause="the ranks did not finish",
    )
    for rank, grads in enumerate(results):
        for name, want in expected.items():
            got = grads.get(name)
            if want is None:
                require(
                    got is None or not got.any(),
                    f"rank {rank}: {name} has no gradient (its layer is unused)",
                    yours=got,
                    expected="None (left alone)",
                    cause="skip parameters whose .grad is None",
                )
                continue
            ratio = (got.norm() / want.norm()).item() if got is not None else float("nan")
            if (
                got is None
                or got.shape != want.shape
                or not torch.allclose(got, want, atol=1e-6, rtol=1e-4)
            ):
                if got is not None and math.isclose(ratio, world_size, rel_tol=1e-3):
                    cause = f"divide the all-reduced sum by the world size ({world_size})"
                else:
                    cause = (
                        "all_reduce (every rank gets the sum), not reduce (only the destination "
                        "rank does), then divide by the world size"
                    )
                fail(
                    f"rank {rank}: gradient of {name} after average_gradients, vs the "
                    "single-process gradient of the full batch (norm shown)",
                    yours=None if got is None else f"norm {got.norm().item():.6f}",
                    expected=f"norm {want.norm().item():.6f}",
                    cause=cause,
                )


def check_average_gradients(average_gradients) -> None:
    """Two gloo processes, each with half of a batch: after ``average_gradients`` every rank
    holds the full-batch gradient; an unused layer (no gradient) is left alone.

    Raises:
        CheckFailed: a rank's gradients differ, or a rank raised.
    """
    average_gradients = student(average_gradients, "average_gradients")
    _compare_gradients(average_gradients, world_size=2, seed=0)
    passed("average_gradients: every rank holds the full-batch gradient (2 gloo processes)")


def check_average_gradients_hidden(average_gradients) -> None:
    """Three gloo processes, another model state and batch."""
    average_gradients = student(average_gradients, "average_gradients")
    _compare_gradients(average_gradients, world_size=3, seed=1)
    passed("average_gradients agrees with full-batch gradients for 3 processes")


# --------------------------------------------------------------------------- shard_indices
def sampler_indices(
    num_samples: int,
    rank: int,
    world_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    drop_last: bool = False,
) -> list[int]:
    """The indices ``torch.utils.data.DistributedSampler`` gives ``rank`` in ``epoch``."""
    sampler = DistributedSampler(
        range(num_samples),
        num_replicas=world_size,
        rank=rank,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
    )
    sampler.set_epoch(epoch)
    return list(sampler)


def _shard_cause(got, config: dict) -> str:
    n, world_size = config["num_samples"], config["world_size"]
    if isinstance(got, list) and len(got) < math.ceil(n / world_size) and not config["drop_last"]:
        return (
            "without drop_last, pad the index list with its own first indices up to a multiple "
            "of the world size, so every rank gets the same number of samples"
        )
    if config["shuffle"] and isinstance(got, list):
        same_epoch0 = got == sampler_indices(**dict(config, epoch=0))
        if same_epoch0 and config["epoch"]:
            return "shuffle with a generator seeded with seed + epoch (what set_epoch changes)"
    return (
        "take a strided slice indices[rank:total:world_size] of one permutation shared by all "
        "ranks (torch.randperm with a generator seeded seed + epoch), not contiguous blocks or "
        "per-rank seeds"
    )


_SHARD_CONFIGS = [
    dict(num_samples=10, rank=r, world_size=2, shuffle=True, seed=0, epoch=e, drop_last=False)
    for r in range(2)
    for e in range(2)
] + [
    dict(num_samples=10, rank=r, world_size=3, shuffle=s, seed=7, epoch=1, drop_last=d)
    for r in range(3)
    for s in (True, False)
    for d in (True, False)
]


def _check_shards(shard_indices, configs) -> None:
    calls = [((), dict(config)) for config in configs]
    records = shard_indices.probe(attempt_all, calls)  # one request for every configuration
    answers = Recorded("shard_indices", calls, records)
    for config in configs:
        got = call_student(answers, **config, name="shard_indices")
        args = dict(config)
        n, rank, ws = args.pop("num_samples"), args.pop("rank"), args.pop("world_size")
        expected = sampler_indices(n, rank, ws, **args)
        if not isinstance(got, list) or got != expected:
            fail(
                f"shard_indices({n}, {rank}, {ws}, "
                + ", ".join(f"{k}={v}" for k, v in args.items())
                + ")",
                yours=got,
                expected=expected,
                cause=_shard_cause(got, config),
            )


def check_shard_indices(shard_indices) -> None:
    """Compare with ``DistributedSampler`` on 16 configurations: 2 and 3 ranks, sizes not
    divisible by the world size, two epochs, with and without shuffle and drop_last.

    Raises:
        CheckFailed: a rank's indices differ from the sampler's.
    """
    shard_indices = student(shard_indices, "shard_indices")
    _check_shards(shard_indices, _SHARD_CONFIGS)
    passed("shard_indices gives exactly DistributedSampler's indices (16 configurations)")


def check_shard_indices_hidden(shard_indices) -> None:
    """Compare with ``DistributedSampler`` on every small configuration."""
    shard_indices = student(shard_indices, "shard_indices")
    configs = [
        dict(num_samples=n, rank=r, world_size=ws, shuffle=s, seed=seed, epoch=e, drop_last=d)
        for n, ws in itertools.product((1, 2, 7, 16, 33), (1, 2, 4, 5))
        for r in range(ws)
        for s, d in itertools.product((True, False), (True, False))
        for seed, e in ((0, 0), (3, 2))
        if not (d and n < ws)
    ]
    _check_shards(shard_indices, configs)
    passed(f"shard_indices agrees with DistributedSampler on {len(configs)} configurations")


# --------------------------------------------------------------------------- ddp_train
#: Training settings the checks and the notebook's demo use (per-rank batch size).
DDP_SETTINGS = {"epochs": 3, "batch_size": 4, "lr": 0.1}


#: Samples in the data sets the checks train on (``ddp_data(seed, n)``): 2 ranks and batches of
#: 4 divide neither, so ``DistributedSampler`` pads each epoch (45 -> 46, 43 -> 44) and every
#: rank's last batch is short (3 and 2 samples): a sampler without its padding, a loader with
#: ``drop_last=True`` or a hand-made shard train differently. Seed 3 is the one-rank run (21
#: samples: a last batch of 1).
CHECK_SAMPLES = {1: 45, 2: 43, 3: 21}


def ddp_data(seed: int = 0, n: int = 48) -> tuple[torch.Tensor, torch.Tensor]:
    """The regression data set of ``ddp_train``: ``n`` samples (48 in the notebook's demo), x of
    shape (n, 8), y (n, 1), float32."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = (x @ torch.randn(8, 1, generator=g)).tanh() + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def _write_config(folder: Path, x, y, seed: int, init_method: str | None) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save((x, y), folder / "data.pt")
    return {
        "backend": "gloo",
        "init_method": init_method or (folder / "store").resolve().as_uri(),
        "data": str(folder / "data.pt"),
        **DDP_SETTINGS,
        "seed": seed,
        "out": str(folder / "model.pt"),
    }


def ddp_config(folder: str | Path, *, init_method: str | None = None, seed: int = 0) -> dict:
    """A training configuration for ``ddp_train``, its data written to ``folder``.

    Args:
        folder: Where the dataset (``data.pt``), the FileStore and the result go.
        init_method: ``"env://"`` for torchrun; default: a FileStore in ``folder``.
        seed: Seed of the data, the model's initialisation and the sampler.

    Returns:
        ``{"backend", "init_method", "data", "epochs", "batch_size", "lr", "seed", "out"}``:
        per-rank ``batch_size``; rank 0 saves the trained ``state_dict`` to ``out``.
    """
    x, y = ddp_data(seed)
    return _write_config(Path(folder), x, y, seed, init_method)


def single_process_training(make_model, x, y, config: dict, world_size: int) -> dict:
    """What DDP training with ``world_size`` ranks must equal: one process, whose k-th step
    takes the union of the ranks' k-th batches.

    Each rank's indices are ``torch.utils.data.DistributedSampler``'s for that rank and epoch
    (shuffled with ``seed + epoch``, padded by repeating its first indices when the ranks do
    not divide the data set), cut into batches of ``batch_size`` with the last one short. Every
    rank then has as many batches of the same sizes, so DDP's averaged gradient (the mean of the
    ranks' mean losses' gradients) is the gradient of the mean loss over the union.

    Args:
        make_model: Builds the model (called after ``torch.manual_seed(config["seed"])``).
        x, y: The data set.
        config: ``epochs``, ``batch_size`` (per rank), ``lr``, ``seed``.
        world_size: Number of ranks being matched.

    Returns:
        The trained ``state_dict``.
    """
    torch.manual_seed(config["seed"])
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    size = config["batch_size"]
    for epoch in range(config["epochs"]):
        shards = []
        for rank in range(world_size):
            sampler = DistributedSampler(
                range(len(x)),
                num_replicas=world_size,
                rank=rank,
                shuffle=True,
                seed=config["seed"],
            )
            sampler.set_epoch(epoch)
            shards.append(list(sampler))
        for start in range(0, len(shards[0]), size):
            idx = torch.tensor([i for shard in shards for i in shard[start : start + size]])
            optimizer.zero_grad()
            F.mse_loss(model(x[idx]), y[idx]).backward()
            optimizer.step()
    return model.state_dict()


def _probe_ddp_train(script: str, launcher: str, world_size: int, x, y, seed: int) -> dict:
    """Probe (no student object): launch ``ddp_train`` of the script the notebook wrote, from
    the student's process, in ``world_size`` gloo processes (``launcher``: ``"spawn"`` or
    ``"torchrun"``) on the data ``(x, y)``; hand back what rank 0 saved (as tensors) or what
    went wrong, as text."""
    with tempfile.TemporaryDirectory(prefix="ddp-check-") as tmp:
        folder = Path(tmp)
        try:
            if launcher == "torchrun":
                config = _write_config(folder, x, y, seed, "env://")
                config_file = folder / "config.json"
                config_file.write_text(json.dumps(config))
                run_torchrun(script, world_size, str(config_file), timeout_s=180)
            else:
                config = _write_config(folder, x, y, seed, None)
                spawn_script(script, world_size, config, timeout_s=120)
        except RanksFailed as exc:
            return {"failed": str(exc)}
        except FileNotFoundError as exc:
            return {"no_script": str(exc)}
        out = Path(config["out"])
        if not out.is_file():
            return {"saved": None}
        try:
            state = torch.load(out, weights_only=True)
        except Exception as exc:  # noqa: BLE001 - what was saved is not a state_dict
            return {"saved": f"a file torch.load(weights_only=True) cannot read ({exc})"[:300]}
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        return {"saved": f"a {type(state).__name__}, not a state_dict of tensors"}
    return {"state": {k: v.detach().cpu().clone() for k, v in state.items()}}


_DDP_CAUSE = (
    "use DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=config['seed']) "
    "and call sampler.set_epoch(epoch) at the start of every epoch; build the model after "
    "torch.manual_seed(config['seed'])"
)


def _check_trained(script: str, launcher: str, seed: int, world_size: int = 2) -> None:
    how = "mp.spawn" if launcher == "spawn" else "torchrun"
    x, y = ddp_data(seed, CHECK_SAMPLES[seed])
    seen = run(_probe_ddp_train, script, launcher, world_size, x, y, seed)
    what = (
        "ddp_train launched with torch.multiprocessing (spawn)"
        if launcher == "spawn"
        else "ddp_script.py launched with torchrun"
    )
    if "no_script" in seen:
        fail(what, yours=seen["no_script"], expected=script, cause="run the %%writefile cell first")
    if "failed" in seen:
        _raise_if_unsolved(seen["failed"], "ddp_train")
        fail(
            what,
            yours=seen["failed"][-2000:],
            expected=f"{world_size} rank(s) train and exit cleanly",
            cause="read the rank's traceback above",
        )
    require(
        "state" in seen,
        f"ddp_train ({how}) must save rank 0's trained state_dict to config['out']",
        yours=seen.get("saved") or "no file written",
        expected="torch.save(model.state_dict(), config['out'])",
        cause="on rank 0: torch.save(model.state_dict(), config['out']) with the model you "
        "wrapped in DDP (or ddp_model.module.state_dict())",
    )
    got = seen["state"]
    config = {**DDP_SETTINGS, "seed": seed}
    expected = single_process_training(reference(ASSIGNMENT).make_model, x, y, config, world_size)
    if set(got) != set(expected):
        prefixed = {k.removeprefix("module.") for k in got} == set(expected)
        fail(
            f"keys of the state_dict rank 0 saved ({how})",
            yours=sorted(got)[:6],
            expected=sorted(expected),
            cause="save the wrapped model's weights, model.state_dict() or "
            "ddp_model.module.state_dict(): the DDP wrapper's own state_dict prefixes every key "
            "with 'module.', so make_model() could not load it"
            if prefixed
            else "train make_model() as given and save its state_dict",
        )
    shapes = {k: (tuple(got[k].shape), tuple(v.shape)) for k, v in expected.items()}
    require(
        all(a == b for a, b in shapes.values()),
        f"shapes of the saved parameters ({how})",
        yours={k: a for k, (a, b) in shapes.items()},
        expected={k: b for k, (a, b) in shapes.items()},
        cause="train make_model() as given",
    )
    worst = max((got[k].float() - expected[k]).abs().max().item() for k in expected)
    require(
        worst <= 1e-5,
        f"parameters after DDP training ({how}, {world_size} gloo processes, {len(x)} samples: "
        "the sampler pads, the last batch is short) vs single-process training on the same "
        "data: largest difference",
        yours=f"{worst:.3g}",
        expected="<= 1e-05",
        cause=_DDP_CAUSE,
    )


def check_ddp_train(script: str = "ddp_script.py") -> None:
    """Launch ``ddp_train`` of ``script`` in 2 gloo processes with ``torch.multiprocessing``
    (spawn) from the student's process, and compare the trained model with single-process
    training on the same data (computed here).

    Raises:
        CheckFailed: a rank failed, nothing was saved, or the model differs.
    """
    _check_trained(script, "spawn", seed=1)
    passed(
        "ddp_train (mp.spawn, 2 gloo processes) trains exactly like one process on the same data"
    )


def check_ddp_train_hidden(script: str = "ddp_script.py") -> None:
    """Launch the script with ``torchrun`` (its ``__main__`` block) and compare again; then
    one rank alone (``world_size=1``, spawn), which must save its model too."""
    _check_trained(script, "torchrun", seed=2)
    _check_trained(script, "spawn", seed=3, world_size=1)
    passed(
        "ddp_train under torchrun trains exactly like one process on the same data, and alone "
        "(world size 1) too"
    )


# --------------------------------------------------------------------------- split_model
def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _tensors_in(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors_in(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors_in(item)


_FACTORIES = {"empty", "zeros", "ones", "full", "randn", "rand", "arange", "tensor", "as_tensor"}
_MOVES = {"to", "cuda", "cpu"}
#: Calls that may mix devices (copies between devices, bookkeeping of Module.to).
_ANY_DEVICES = {"copy_", "__set__", "__get__", "_has_compatible_shallow_copy_type"}


class VirtualDevices(TorchFunctionMode):
    """CPU tensors that behave as if they lived on devices ``cuda:0``, ``cuda:1``, ...

    Inside the mode, ``tensor.to("cuda:1")``, ``.cuda()``, ``module.to(...)`` and factories
    with ``device=`` place tensors on a virtual device (their data stays in CPU memory and
    every result is computed for real), ``tensor.device`` reports it, ``.cpu()`` brings a
    tensor back, and an op that mixes tensors of two devices raises the RuntimeError CUDA
    raises ("Expected all tensors to be on the same device"). Autograd works across moves.
    Used to check device placement on machines without several GPUs.
    """

    def __init__(self):
        super().__init__()
        self.tags: dict[int, str] = {}
        self._keep: list = []  # tagged storages stay alive, so no address is reused

    def device_of(self, t: torch.Tensor) -> str:
        """The (virtual) device of ``t``: ``"cuda:<i>"`` or ``"cpu"``."""
        key = _storage_key(t)
        return self.tags.get(key, "cpu") if key else "cpu"

    def _tag(self, t: torch.Tensor, device: str) -> None:
        key = _storage_key(t)
        if not key:
            return
        if device == "cpu":
            self.tags.pop(key, None)
        else:
            self.tags[key] = device
            self._keep.append(t.untyped_storage())

    @staticmethod
    def _normalize(device) -> str | None:
        if device is None:
            return None
        if isinstance(device, int):
            return f"cuda:{device}"
        d = torch.device(device)
        if d.type == "cuda":
            return f"cuda:{d.index or 0}"
        if d.type == "cpu":
            return "cpu"
        raise RuntimeError(f"VirtualDevices plays cpu and cuda:<i> only, not {d}")

    def _move(self, name, args, kwargs):
        src = args[0]
        dtype, target = kwargs.get("dtype"), None
        if name == "cpu":
            target = "cpu"
        elif name == "cuda":
            target = self._normalize(args[1] if len(args) > 1 else kwargs.get("device", 0))
        else:
            for a in list(args[1:]) + [kwargs.get("device")]:
                if isinstance(a, (str, torch.device)):
                    target = self._normalize(a)
                elif isinstance(a, torch.dtype):
                    dtype = a
                elif isinstance(a, torch.Tensor):
                    target, dtype = self.device_of(a), a.dtype
        out = src
        if dtype is not None and dtype != src.dtype:
            out = src.to(dtype)
        if target is None or target == self.device_of(src):
            if out is not src:
                self._tag(out, self.device_of(src))
            return out
        out = out.clone()  # a copy to the other device; differentiable
        self._tag(out, target)
        return out

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "__get__":  # property reads: func is a fresh method-wrapper each time
            prop = getattr(getattr(func, "__self__", None), "__name__", "")
            if prop == "device":
                return torch.device(self.device_of(args[0]))
            if prop == "is_cuda":
                return self.device_of(args[0]) != "cpu"
        if name in _MOVES and args and isinstance(args[0], torch.Tensor):
            return self._move(name, args, kwargs)
        if (name in _FACTORIES or name.endswith("_like")) and "device" in kwargs:
            target = self._normalize(kwargs["device"])
            out = func(*args, **dict(kwargs, device="cpu"))
            self._tag(out, target)
            return out
        devices = {
            self.device_of(t)
            for t in _tensors_in((args, kwargs))
            if not (t.dim() == 0 and self.device_of(t) == "cpu")  # CPU scalars mix freely
        }
        if name not in _ANY_DEVICES and len(devices) > 1:
            a, b = sorted(devices)
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, {a} and {b}! (course's virtual devices, in {name})"
            )
        out = func(*args, **kwargs)
        if len(devices) == 1 and name not in _ANY_DEVICES:
            (device,) = devices
            if device != "cpu":
                for t in _tensors_in(out):
                    self._tag(t, device)
        return out


def _test_model(sizes: list[int], seed: int, relu: bool = True) -> nn.Sequential:
    """Linear layers of the given widths with ReLUs between them (none with ``relu=False``,
    so that the last two layers both have parameters): uneven stage costs."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if relu and i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def best_max_stage(model: nn.Sequential, k: int) -> int:
    """The smallest possible parameter count of the largest of ``k`` contiguous, non-empty
    stages of ``model`` (dynamic programming over the split points)."""
    sizes = [sum(p.numel() for p in layer.parameters()) for layer in model]
    n = len(sizes)
    prefix = [0, *itertools.accumulate(sizes)]
    best = [[math.inf] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0
    for stages in range(1, k + 1):
        for end in range(stages, n + 1):
            best[stages][end] = min(
                max(best[stages - 1][start], prefix[end] - prefix[start])
                for start in range(stages - 1, end)
            )
    return int(best[k][n])


def _contiguous_sizes(model: nn.Sequential, k: int) -> set[tuple[int, ...]]:
    sizes = [sum(p.numel() for p in layer.parameters()) for layer in model]
    out = set()
    for cuts in itertools.combinations(range(1, len(sizes)), k - 1):
        bounds = [0, *cuts, len(sizes)]
        out.add(tuple(sum(sizes[a:b]) for a, b in itertools.pairwise(bounds)))
    return out


def _split_call(split_model, model, devices) -> tuple[dict, object]:
    """Call the student's ``split_model`` (inside a probe): its outcome as an attempt record,
    and the module it returned (or None)."""
    try:
        split = split_model(model, list(devices))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the outcome is the record
        return {"ok": False, "error": handover.describe(exc)}, None
    return {"ok": True, "value": None}, split


def _type_name(obj) -> str:
    kind = type(obj)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _probe_split_virtual(
    split_model, sizes: list[int], devices: list[str], seed: int, relu: bool = True
) -> dict:
    """Probe: split the test model over virtual devices (:class:`VirtualDevices`), run it on a
    CPU input; hand back the call's outcome, the (virtual) device and size of every parameter,
    and the output with its device, or the forward's error message."""
    model = _test_model(sizes, seed, relu)
    x = torch.randn(5, sizes[0], generator=torch.Generator().manual_seed(seed))
    seen: dict = {}
    with VirtualDevices() as vd:
        seen["call"], split = _split_call(split_model, model, devices)
        if split is None:
            return seen
        seen["type"] = _type_name(split)
        if not isinstance(split, nn.Module):
            return seen
        seen["parameters"] = [(vd.device_of(p), p.numel()) for p in split.parameters()]
        try:
            out = split(x)
        except Exception as exc:  # noqa: BLE001 - the message is what the check reads
            seen["forward_error"] = (
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
            return seen
        if isinstance(out, torch.Tensor):
            seen["out_device"] = vd.device_of(out)
    seen["out"] = out.detach().clone() if isinstance(out, torch.Tensor) else None
    seen["out_type"] = _type_name(out)
    return seen


def _require_split_module(seen: dict) -> None:
    call_student(Recorded("split_model", [((), {})], [seen["call"]]), name="split_model")
    require(
        seen.get("type") is not None and "parameters" in seen,
        "split_model must return an nn.Module",
        yours=seen.get("type"),
        expected="nn.Module",
        cause="wrap the stages in a module whose forward runs them in order",
    )


def _check_virtual(
    split_model, sizes: list[int], devices: list[str], seed: int, relu: bool = True
) -> None:
    seen = split_model.probe(_probe_split_virtual, sizes, list(devices), seed, relu)
    _require_split_module(seen)
    per_device = dict.fromkeys(devices, 0)
    for device, numel in seen["parameters"]:
        require(
            device in per_device,
            "every parameter must be on one of the given devices",
            yours=device,
            expected=devices,
            cause="move each stage with stage.to(device)",
        )
        per_device[device] += numel
    stage_sizes = [per_device[d] for d in devices]
    if "forward_error" in seen:
        error = seen["forward_error"]
        if "same device" in error:
            fail(
                f"forward of the split model on devices {devices} (input on cpu)",
                yours=error,
                expected="the input moved to each stage's device before the stage runs",
                cause="in forward, x = x.to(device) before every stage, the first one included",
            )
        fail(
            f"forward of the split model on devices {devices} (input on cpu)",
            yours=error,
            expected="the output of the last stage",
            cause="run each stage on its device, in order, and return the last stage's output",
        )
    out = seen["out"]
    require(
        isinstance(out, torch.Tensor),
        f"the split model's forward on devices {devices} must return a tensor",
        yours=seen["out_type"],
        expected="torch.Tensor",
        cause="return the last stage's output",
    )
    require(
        seen["out_device"] == devices[-1],
        f"device of the split model's output (devices {devices})",
        yours=seen["out_device"],
        expected=devices[-1],
        cause="run every stage, the last one included, on its device: move the activation "
        "even into a stage without parameters",
    )
    unsplit = _test_model(sizes, seed, relu)
    x = torch.randn(5, sizes[0], generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        want = unsplit(x)
    require(
        out.shape == want.shape and torch.allclose(out, want, atol=1e-6),
        f"output of the split model on {devices}",
        yours=f"largest difference {(out - want).abs().max().item():.3g}"
        if out.shape == want.shape
        else f"shape {tuple(out.shape)}",
        expected="equal to the unsplit model",
        cause="keep every layer, in order, exactly once",
    )
    best = best_max_stage(unsplit, len(devices))
    require(
        tuple(stage_sizes) in _contiguous_sizes(unsplit, len(devices)),
        f"parameters per device {devices} must come from contiguous, non-empty, in-order stages",
        yours=stage_sizes,
        expected="the sizes of consecutive groups of layers, first group on the first device",
        cause="cut the Sequential into len(devices) consecutive slices, in order",
    )
    require(
        max(stage_sizes) == best,
        f"largest stage (parameters) of the split over {len(devices)} devices; layer parameter "
        f"counts {[sum(p.numel() for p in m.parameters()) for m in unsplit]}",
        yours=f"{max(stage_sizes)} (stages {stage_sizes})",
        expected=best,
        cause="choose the cut points that minimise the largest stage's parameter count (try "
        "every split, or binary-search the limit), not an equal number of layers per device "
        "nor a greedy fill up to total / len(devices); a cut may fall before any layer but the "
        "first, the last one included",
    )


@contextlib.contextmanager
def _exact_fp32_matmuls():
    """Full-precision float32 matmuls on CUDA (no TF32) inside the block, with PyTorch's
    current API (torch 2.9+); the previous setting is restored."""
    matmul = torch.backends.cuda.matmul
    saved = matmul.fp32_precision
    matmul.fp32_precision = "ieee"
    try:
        yield
    finally:
        matmul.fp32_precision = saved


def _real_input(sizes: list[int], seed: int) -> torch.Tensor:
    return torch.randn(6, sizes[0], generator=torch.Generator().manual_seed(seed))


def _probe_split_real(split_model, sizes: list[int], devices: list[str], seed: int) -> dict:
    """Probe: split the test model over real devices, run forward and backward of
    ``out.square().sum()``; hand back the output (on the CPU) and its device, the input's
    gradient and every parameter's gradient in ``.parameters()`` order."""
    model = _test_model(sizes, seed)
    context = (
        _exact_fp32_matmuls() if any("cuda" in d for d in devices) else contextlib.nullcontext()
    )
    seen: dict = {}
    with context:
        seen["call"], split = _split_call(split_model, model, devices)
        if split is None:
            return seen
        seen["type"] = _type_name(split)
        if not isinstance(split, nn.Module):
            return seen
        seen["parameters"] = [(str(p.device), p.numel()) for p in split.parameters()]
        xa = _real_input(sizes, seed).requires_grad_()
        try:
            out = split(xa)
            if not isinstance(out, torch.Tensor):
                seen["out_type"] = _type_name(out)
                return seen
            seen["out_device"] = str(out.device)
            seen["out"] = out.detach().cpu().clone()
            out.square().sum().backward()
        except Exception as exc:  # noqa: BLE001
            seen["forward_error"] = (
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            )
            return seen
        seen["x_grad"] = None if xa.grad is None else xa.grad.detach().cpu().clone()
        seen["grads"] = [
            None if p.grad is None else p.grad.detach().cpu().clone() for p in split.parameters()
        ]
    return seen


def _check_real(split_model, sizes, devices, seed, tol=1e-6) -> None:
    seen = split_model.probe(_probe_split_real, sizes, list(devices), seed)
    _require_split_module(seen)
    if "forward_error" in seen:
        fail(
            f"forward and backward of the split model on {devices}",
            yours=seen["forward_error"],
            expected="the output of the last stage, and gradients",
            cause="move the input to each stage's device with .to(device) (differentiable)",
        )
    require(
        "out" in seen,
        f"the split model's forward on {devices} must return a tensor",
        yours=seen.get("out_type"),
        expected="torch.Tensor",
        cause="return the last stage's output",
    )
    unsplit = _test_model(sizes, seed)
    xb = _real_input(sizes, seed).requires_grad_()
    want = unsplit(xb)
    want.square().sum().backward()
    out = seen["out"]
    require(
        torch.device(seen["out_device"]) == torch.device(devices[-1]),
        f"output device on {devices}",
        yours=seen["out_device"],
        expected=devices[-1],
        cause="the last stage runs on the last device",
    )
    require(
        out.shape == want.shape and torch.allclose(out, want.detach(), atol=tol, rtol=1e-4),
        f"output of the split model on {devices}",
        yours=f"largest difference {(out - want.detach()).abs().max().item():.3g}"
        if out.shape == want.shape
        else f"shape {tuple(out.shape)}",
        expected="equal to the unsplit model",
        cause="keep every layer, in order, exactly once",
    )
    x_grad = seen["x_grad"]
    require(
        x_grad is not None and torch.allclose(x_grad, xb.grad, atol=tol, rtol=1e-4),
        f"gradient with respect to the input, split on {devices}",
        yours="None"
        if x_grad is None
        else f"largest difference {(x_grad - xb.grad).abs().max().item():.3g}",
        expected="equal to the unsplit model's",
        cause="move activations with .to(device) (differentiable), never detach them",
    )
    mine, theirs = seen["grads"], list(unsplit.parameters())
    require(
        len(mine) == len(theirs),
        "number of parameter tensors of the split model",
        yours=len(mine),
        expected=len(theirs),
        cause="keep every layer exactly once",
    )
    for i, (g, q) in enumerate(zip(mine, theirs)):
        require(
            g is not None
            and g.shape == q.grad.shape
            and torch.allclose(g, q.grad, atol=tol, rtol=1e-4),
            f"gradient of parameter {i} (in .parameters() order) after backward",
            yours="None" if g is None else f"norm {g.norm().item():.6f}",
            expected=f"norm {q.grad.norm().item():.6f}",
            cause="register the stages in order (nn.ModuleList) and keep the layers' parameters",
        )


def check_split_model(split_model) -> None:
    """Check placement, balance and output device on virtual devices cuda:0, cuda:1, cuda:2
    (CPU tensors labelled as devices), then output and gradients on ``["cpu", "cpu"]``.

    Raises:
        CheckFailed: input not moved, unbalanced or non-contiguous stages, output on the
            wrong device, or output/gradients different from the unsplit model.
    """
    split_model = student(split_model, "split_model")
    _check_virtual(split_model, [16, 64, 8, 128, 8], ["cuda:0", "cuda:1"], seed=0)
    _check_virtual(split_model, [32, 8, 8, 8, 64, 4], ["cuda:0", "cuda:1", "cuda:2"], seed=1)
    # Six equal layers over four devices: stages of 2, 2, 1 and 1 layers; filling each device
    # up to a quarter of the total puts one layer on each of the first three and three on the last.
    _check_virtual(split_model, [8] * 7, ["cuda:0", "cuda:1", "cuda:2", "cuda:3"], seed=7)
    _check_real(split_model, [16, 64, 8, 128, 8], ["cpu", "cpu"], seed=2)
    passed(
        "split_model: balanced contiguous stages, activations moved, output and gradients as unsplit"
    )


def _probe_split_errors(split_model) -> list:
    """Probe: the two calls the statement says raise ValueError (no device; fewer layers than
    devices), as attempt records."""
    return [
        attempt(split_model, _test_model([8, 8], seed=0), []),
        attempt(split_model, _test_model([8, 8, 8], seed=0, relu=False), ["cpu"] * 3),
    ]


def _check_split_errors(split_model) -> None:
    no_device, too_few = split_model.probe(_probe_split_errors)
    for record, call in (
        (no_device, "split_model(<1 layer>, [])"),
        (too_few, "split_model(<2 layers>, ['cpu', 'cpu', 'cpu'])"),
    ):
        expect_raises(
            ValueError,
            outcome,
            record,
            what=f"{call} must raise ValueError",
            cause="every device needs a non-empty stage: raise ValueError when there is no "
            "device or fewer layers than devices (as many layers as devices is fine: one each)",
        )


def check_split_model_hidden(split_model) -> None:
    """More shapes: a trailing parameter-free layer, more devices, layers of equal size, one
    device, as many layers as devices, a first stage of one layer; ValueError without a device
    or with fewer layers than devices."""
    split_model = student(split_model, "split_model")
    _check_split_errors(split_model)
    _check_virtual(split_model, [8, 16, 8], ["cuda:0"], seed=9)  # one device: one stage
    # three layers on three devices: one each
    _check_virtual(split_model, [8, 8, 8, 8], ["cuda:0", "cuda:1", "cuda:2"], seed=10, relu=False)
    # the first layer alone outweighs the rest: the only best split cuts right after it
    _check_virtual(split_model, [64, 64, 4, 4], ["cuda:0", "cuda:1"], seed=11, relu=False)
    _check_virtual(split_model, [8, 8, 8, 8, 8], ["cuda:0", "cuda:1", "cuda:2", "cuda:3"], seed=3)
    model_sizes = [64, 4, 64, 4, 64]
    _check_virtual(split_model, model_sizes, ["cuda:1", "cuda:0"], seed=4)
    # No ReLUs: the big last layer alone on the last device, a cut before the last layer.
    _check_virtual(split_model, [8, 8, 8, 8, 64], ["cuda:0", "cuda:1"], seed=8, relu=False)
    _check_real(split_model, [8, 32, 32, 32, 2], ["cpu", "cpu", "cpu"], seed=5)
    passed("split_model handles more devices and layer sizes")


def check_split_model_cuda(split_model) -> None:
    """On a GPU: ``["cuda:0", "cpu"]``, output and gradients as the unsplit model (computed
    here on the CPU; the student's process runs its CUDA matmuls in full float32)."""
    if not cuda_or_not_checked('split_model on ["cuda:0", "cpu"]'):
        return
    split_model = student(split_model, "split_model")
    _check_real(split_model, [16, 64, 8, 128, 8], ["cuda:0", "cpu"], seed=6, tol=1e-5)
    passed('split_model on ["cuda:0", "cpu"] matches the unsplit model')
