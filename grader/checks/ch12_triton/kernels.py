"""Checks for 12_triton, Exercises 1-4: bias_gelu, softmax_rows, matmul, attention_forward.

Each exercise is a Triton kernel and the Python function that launches it. On the CPU the
probes (course code that runs where the student's code lives: under autograde, in their kernel)
call the student's function on CPU tensors inside :func:`grader.runtime.triton_cpu.count_traffic`,
so every launch runs under Triton's interpreter and hands back, as plain data, what it did to
memory: bytes loaded and stored per tensor (each tensor recognised by its address: the input
``x``, the ``bias``, the returned output, or any other tensor the function made), the launches
and their grids, and every access outside the tensors (never performed). The checks judge, in
the grading process: no out-of-bounds lane (the missing mask), the output fully written (a grid
that misses the last block), never loaded, and returned as the last launch left it (not filled
afterwards by torch or through a numpy view), the inputs unchanged (when each launch starts and
at the end), the values against torch's, and the bytes against the minimum the operation needs
(see each ``check_*``'s docstring for the exact bounds). ``attention_forward`` is also run
under a :class:`torch.utils._python_dispatch.TorchDispatchMode` that records the
floating-point tensors its torch operations create: an ``L x S`` score matrix made with torch
is seen there, one written by a kernel into a scratch tensor in its stores (and the scratch
tensor's allocation).

The visible cases are hand-picked edges; the hidden checks add cases drawn (seeded) from each
statement's whole domain (:func:`draw_cases`: sizes no block divides, every stride and layout,
extreme values, the largest sizes allowed).

``triton.autotune`` cannot time configs under the interpreter ("0 active drivers"), so while a
probe runs a kernel on CPU tensors, every autotuned kernel runs one config without timing
anything: its own first one, or one of the student's GPU configs (``matmul_configs(True)``),
each of which :func:`_probe_matmul_configs` runs in turn; on CUDA tensors the autotuner works
as usual, and the ``_cuda`` checks record how many configs it had.

**Compiled.** Every kernel a visible check launches is recorded
(:func:`grader.runtime.triton_compile.record_launches`) and, once the cases have passed,
compiled for sm_90 and sm_80 in a fresh process by a second probe (:func:`_probe_compile`,
judged by :func:`_judge_compiled`): the compiler's rejections fail, a block no GPU could
launch fails (for autotune configs: only when none fits), a float32 ``tl.dot`` of the matmul
must be float32-accurate (its TTIR precision), and the pass message gives the compiled
registers, spills, shared memory and occupancy.

The ``_cuda`` checks run each function on CUDA tensors of realistic sizes: values, and the
kernel's time against torch's for the same operation (``torch.utils.benchmark``, medians of
blocked runs, in one probe so the ratio comes from one machine and one moment). Their bands are
wide (see the constants); the figures the notebook quotes come from ``python -m grader measure``
(keys ``triton_bias_gelu_vs_torch``, ``triton_softmax_bandwidth``, ``triton_matmul_tflops``).
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from grader.checks.common import (
    call_student,
    cuda_or_not_checked,
    fail,
    passed,
    require,
)
from grader.runtime import handover, triton_compile, triton_cpu
from grader.runtime.course import reference
from grader.runtime.remote import attempt, outcome, student

ASSIGNMENT = "12_triton"
#: The test cells' checks run in the grading process under autograde (grader.grading.judge).
JUDGED_IN_GRADER = True

MASK_CAUSE = (
    "a missing mask: the last block of a tensor whose size is not a multiple of BLOCK has "
    "lanes past its end, and an unmasked tl.load or tl.store touches them (on a GPU: garbage "
    "read, or another tensor's memory overwritten). Give every tl.load and tl.store a mask, "
    "e.g. mask = offsets < n (for 2-D blocks, (rows[:, None] < M) & (cols[None, :] < N))"
)
GRID_CAUSE = (
    "the grid misses the last, partial block: n // BLOCK program instances cover only the "
    "full blocks; launch triton.cdiv(n, BLOCK) of them (and mask the lanes past the end)"
)


# --------------------------------------------------------------------------- inputs
def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make_inputs(kind: str, spec: tuple, device: str = "cpu") -> tuple:
    """The inputs of one case, the same wherever they are made (seeded).

    Args:
        kind: "bias_gelu", "softmax_rows", "matmul" or "attention_forward".
        spec: bias_gelu: ``(M, N, seed[, scale])``: ``x`` is ``scale * randn`` (scale 2 unless
            given; 30 and more reach values where a naive ``exp`` overflows float32);
            softmax_rows: ``(M, N, row_stride, offset, seed)`` (``x`` is the first ``N``
            columns of an ``(M, row_stride)`` tensor of ``4 * randn``, plus ``offset``; a sixth
            item replaces the 4: a row's values spread wide);
            matmul: ``(M, K, N, dtype name, layout, seed)`` with ``layout`` two letters, one for
            ``a`` and one for ``b``: ``n`` contiguous, ``t`` a transposed view (``w.t()``),
            ``s`` the first columns of a wider tensor (rows strided), ``g`` every other column
            of a wider tensor (column stride 2);
            attention_forward: ``(L, S, d, seed[, pad[, q_scale[, negative]]])``: q, k and v
            the first ``d`` columns of tensors ``pad`` columns wider (rows strided, last
            dimension contiguous) where ``pad > 0`` (``pad`` an int for all three, or a tuple
            ``(pad_q, pad_k, pad_v)``: different row strides), q multiplied by ``q_scale``
            (scores in the hundreds); ``negative``: k shares a large component that q points
            against, so every score of every row is very negative (near -160); ``"mixed"``:
            of the odd rows only (rows of one block whose scores differ by about 160).
        device: where to make them (CPU tensors are made on the CPU and moved).
    """
    if kind == "bias_gelu":
        m, n, seed, *scale = spec
        g = _gen(seed)
        out = (torch.randn(m, n, generator=g) * (scale or [2])[0], torch.randn(n, generator=g))
    elif kind == "softmax_rows":
        m, n, row_stride, offset, seed, *scale = spec
        wide = torch.randn(m, row_stride, generator=_gen(seed)) * (scale or [4])[0] + offset
        out = (wide[:, :n],)
    elif kind == "matmul":
        m, k, n, dtype, layout, seed = spec
        g = _gen(seed)
        dt = getattr(torch, dtype)
        out = (
            _laid_out(torch.randn(m, k, generator=g).to(dt), layout[0]),
            _laid_out(torch.randn(k, n, generator=g).to(dt), layout[1]),
        )
    elif kind == "attention_forward":
        length, s, d, seed, *extra = spec
        pad, q_scale, negative = (list(extra) + [0, 1.0, False][len(extra) :])[:3]
        pads = tuple(pad) if isinstance(pad, (tuple, list)) else (pad, pad, pad)
        g = _gen(seed)
        # rows strided where pad > 0: the first d columns of (r, d + pad) tensors
        wide = [torch.randn(r, d + p, generator=g) for r, p in zip((length, s, s), pads)]
        wide[0] *= q_scale
        if negative:
            # k = c u + noise, q = -c u + noise / 10 for a unit vector u and c^2 = 160 sqrt(d):
            # every score near -160, below where exp underflows float32 (about -104); "mixed":
            # only the odd rows of q, so the even ones keep scores near 0 and two rows of one
            # block of queries differ by about 160 (a max taken over the block, not per row,
            # underflows the odd rows)
            u = torch.ones(d) / math.sqrt(d)
            c = math.sqrt(160 * math.sqrt(d))
            wide[1][:, :d] += c * u
            rows = slice(1, None, 2) if negative == "mixed" else slice(None)
            wide[0][rows, :d] = wide[0][rows, :d] * 0.1 - c * u
        out = tuple(t[:, :d] if p else t for t, p in zip(wide, pads))
    else:
        raise ValueError(f"unknown exercise {kind!r}")
    if device == "cpu":
        return out
    return tuple(_to_device(t, device) for t in out)


def _laid_out(t: torch.Tensor, how: str) -> torch.Tensor:
    """``t``'s values with the layout ``how`` (see :func:`make_inputs`' matmul layouts)."""
    rows, cols = t.shape
    if how == "n":
        return t
    if how == "t":
        return t.t().contiguous().t()
    if how == "s":  # the first columns of a wider tensor: row stride cols + 5
        wide = torch.zeros(rows, cols + 5, dtype=t.dtype)
        wide[:, :cols] = t
        return wide[:, :cols]
    if how == "g":  # every other column of a tensor twice as wide: strides (2 * cols, 2)
        wide = torch.zeros(rows, 2 * cols, dtype=t.dtype)
        wide[:, ::2] = t
        return wide[:, ::2]
    raise ValueError(f"unknown layout {how!r}: one of n, t, s, g")


def _to_device(t: torch.Tensor, device: str) -> torch.Tensor:
    """``t`` on ``device`` with the same strides (a view of a wider tensor stays one)."""
    if t.is_contiguous():
        return t.to(device)
    if t.stride(1) != 1 and t.t().is_contiguous():  # a transposed view
        return t.t().contiguous().to(device).t()
    # rows strided (a column slice, every other column): the rows with their tails, moved, then
    # the same view of them
    base = t.as_strided((t.shape[0], t.stride(0)), (t.stride(0), 1))
    return base.to(device).as_strided(tuple(t.shape), t.stride())


def expected(kind: str, args: tuple) -> torch.Tensor:
    """What torch computes for the exercise (float64 for the matmul)."""
    if kind == "bias_gelu":
        x, bias = args
        return F.gelu(x + bias, approximate="tanh")
    if kind == "softmax_rows":
        return torch.softmax(args[0].double(), dim=1).float()
    if kind == "matmul":
        a, b = args
        return a.double() @ b.double()
    q, k, v = args
    return F.scaled_dot_product_attention(q[None].double(), k[None].double(), v[None].double())[0]


def draw_cases(kind: str, seed: int, count: int) -> list[tuple]:
    """``count`` cases drawn (seeded: the same every time) from the whole domain the exercise's
    statement allows, for the hidden checks: sizes that no power-of-two block divides, one
    row or column, every layout and stride the statement allows, values large enough that a
    naive ``exp`` overflows float32 or every ``exp`` underflows, and the largest sizes the
    statement allows, kept small enough in the other dimensions for the interpreter.

    Args:
        kind: the exercise (see :func:`make_inputs` for each spec's meaning).
        seed: the draw's seed; ``count``: how many.

    Returns:
        Specs for :func:`make_inputs`.
    """
    import random

    rng = random.Random(f"{kind}:{seed}")
    out: list[tuple] = []
    for i in range(count):
        case_seed = 1000 + 97 * seed + i
        if kind == "bias_gelu":
            n = rng.choice([1, 2, 3, rng.randint(4, 200), rng.randint(200, 3000)])
            m = rng.choice([0, 1, rng.randint(2, 64), rng.randint(2, max(2, 8000 // n))])
            scale = rng.choice([2.0, 2.0, 30.0, 100.0])
            out.append((m, n, case_seed, scale))
        elif kind == "softmax_rows":
            n = rng.choice([1, 2, rng.randint(3, 130), rng.randint(130, 4096), 4096])
            m = rng.choice([0, 1, rng.randint(2, max(2, min(40, 60000 // n)))])
            stride = n + rng.choice([0, 0, rng.randint(1, 70)])
            offset = rng.choice([0.0, 0.0, 1e4, -1e4, -300.0, 120.0])
            spread = rng.choice([4.0, 4.0, 100.0, 300.0])
            out.append((m, n, stride, offset, case_seed, spread))
        elif kind == "matmul":
            dtype = rng.choice(["float32", "float16"])
            layout = rng.choice("ntsg") + rng.choice("ntsg")
            if rng.random() < 0.25:  # the largest K the statement allows, small M and N
                k = MATMUL_MAX_K
                m, n = rng.randint(1, 20), rng.randint(1, 20)
            else:
                k = rng.choice([1, rng.randint(2, 40), rng.randint(40, 300)])
                m = rng.choice([1, rng.randint(2, 70), rng.randint(70, 150)])
                n = rng.choice([1, rng.randint(2, 70), rng.randint(70, 150)])
            out.append((m, k, n, dtype, layout, case_seed))
        elif kind == "attention_forward":
            d = rng.choice([16, 32, 64, 128])
            length = rng.choice([1, rng.randint(2, 40), rng.randint(40, 130)])
            s = rng.choice([1, rng.randint(2, 40), rng.randint(40, 130)])
            pads = tuple(rng.choice([0, 0, rng.randint(1, 40)]) for _ in range(3))
            q_scale = rng.choice([1.0, 1.0, 30.0])
            negative = rng.choice([False, False, True, "mixed"])
            out.append((length, s, d, case_seed, pads, q_scale, negative))
        else:
            raise ValueError(f"unknown exercise {kind!r}")
    return out


# --------------------------------------------------------------------------- probe side
def _span(t: torch.Tensor) -> tuple[int, int]:
    """A tensor's bytes in memory: first element to one past the last."""
    if t.numel() == 0:
        return (t.data_ptr(), t.data_ptr())
    last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
    return (t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size())


@contextlib.contextmanager
def _autotune_without_timing(seen: dict):
    """While active: an autotuned kernel launched on CPU tensors runs, without timing any (the
    interpreter cannot), the config ``seen["config"]`` where given (a ``triton.Config``: one of
    the student's GPU configs), else its own config ``seen.get("index", 0)`` (the last one if
    it has fewer); on CUDA tensors the autotuner runs as usual. Records in ``seen`` whether an
    autotuned kernel ran (``"autotuned"``), its number of configs (``"configs"``) and its
    ``key`` (``"keys"``: the argument names whose values choose a config)."""
    from triton.runtime.autotuner import Autotuner

    original = Autotuner.run

    def run(self, *args, **kwargs):
        seen["autotuned"] = True
        seen["configs"] = max(seen.get("configs", 0), len(self.configs))
        seen["keys"] = [str(k) for k in getattr(self, "keys", [])]
        if any(getattr(a, "is_cuda", False) for a in args):
            return original(self, *args, **kwargs)
        config = (
            seen.get("config") or self.configs[min(seen.get("index", 0), len(self.configs) - 1)]
        )
        self.nargs = dict(zip(self.arg_names, args))
        self.best_config = config
        try:
            if config.pre_hook is not None:
                config.pre_hook({**self.nargs, **kwargs, **config.all_kwargs()})
            return self.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            self.nargs = None

    Autotuner.run = run
    try:
        yield
    finally:
        Autotuner.run = original


class _TensorsMade:
    """Records the floating-point tensors that torch operations create while active (shape of
    each one with at least ``threshold`` elements). Left out: integer and byte tensors, and
    ``set_`` (the interpreter's copies of the kernel's arguments: byte views of their storage,
    then the argument re-viewed on it; no new data)."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold
        self.big: list[tuple[str, list[int]]] = []
        self.mode = None

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if str(func).startswith("aten.set_"):  # the interpreter re-viewing an argument
                    return out
                for t in out if isinstance(out, (list, tuple)) else [out]:
                    if (
                        isinstance(t, torch.Tensor)
                        and t.is_floating_point()
                        and t.numel() >= outer.threshold
                    ):
                        outer.big.append((str(func).removeprefix("aten."), list(t.shape)))
                return out

        self.mode = Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def _traffic_data(log, roles: dict[str, tuple[int, int]]) -> dict:
    """The counted launches as plain data, each tensor argument attributed to a role by address
    (``"other"`` for a tensor the caller did not name: a copy, a scratch buffer)."""
    per: dict[str, dict[str, int]] = {}
    for traffic in log:
        for name, t in traffic.per_tensor.items():
            role = next((r for r, (lo, hi) in roles.items() if lo <= t.address < max(hi, lo + 1)),
                        "other")  # fmt: skip
            row = per.setdefault(role, dict.fromkeys(
                ("loaded", "stored", "distinct_loaded", "distinct_stored", "nbytes"), 0))  # fmt: skip
            row["loaded"] += t.loaded_bytes
            row["stored"] += t.stored_bytes
            row["distinct_loaded"] += t.distinct_loaded_bytes
            row["distinct_stored"] += t.distinct_stored_bytes
            row["nbytes"] = max(row["nbytes"], t.nbytes)
            if role == "other":
                row.setdefault("names", []).append(f"{traffic.launches[0][0]}:{name}")
    return {
        "launches": [[name, list(grid)] for t in log for name, grid in t.launches],
        "oob": [r.describe() for t in log for r in t.out_of_bounds][:5],
        "oob_lanes": sum(t.out_of_bounds_lanes for t in log),
        "loads": sum(t.loads_bytes for t in log),
        "stores": sum(t.stores_bytes for t in log),
        "storing_programs": sum(t.storing_programs for t in log),
        "undefined_lanes": getattr(log, "undefined_lanes", 0),
        "roles": per,
    }


ROLES = {
    "bias_gelu": ("x", "bias"),
    "softmax_rows": ("x",),
    "matmul": ("a", "b"),
    "attention_forward": ("q", "k", "v"),
}


def _counted_call(fn, kind: str, spec: tuple, config_index: int = 0, config=None) -> dict:
    """Run ``fn`` on the case's CPU tensors under the interpreter, counting; plain data back.
    An autotuned kernel runs its config ``config_index``, or ``config`` where given (see
    :func:`_autotune_without_timing`)."""
    args = make_inputs(kind, spec)
    roles = {name: _span(t) for name, t in zip(ROLES[kind], args)}
    originals = {name: _bytes(lo, hi) for name, (lo, hi) in roles.items()}
    seen: dict = {"index": config_index, "config": config}
    box: dict = {}
    made = None
    if kind == "attention_forward":
        length, s, d = spec[:3]
        # only where an L x S tensor is larger than every tensor the function needs
        made = _TensorsMade(length * s) if length * s > max(length, s) * d else None

    def run():
        import warnings

        import numpy as np

        # the interpreter computes in NumPy, which warns on stderr where a float32 exp
        # overflows to inf (tl.sigmoid(-100) is 1 / (1 + inf) = 0, exactly as on a GPU): a
        # warning is not the student's error, and nbgrader scores a cell with stderr output 0
        with (
            warnings.catch_warnings(),
            np.errstate(all="ignore"),
            _autotune_without_timing(seen),
            triton_compile.record_launches() as launches,
            triton_cpu.count_traffic() as log,
            made if made is not None else contextlib.nullcontext(),
        ):
            warnings.simplefilter("ignore", RuntimeWarning)
            box["log"] = log
            box["launches"] = launches
            out = fn(*args)
        box["out"] = out
        return out

    record = attempt(run)
    out = box.get("out")
    changed = False
    if isinstance(out, torch.Tensor):
        roles["out"] = _span(out)
        changed = _changed_after_kernels(out, box.get("log"))
    result = {
        "call": record,
        "traffic": _traffic_data(box.get("log", []), roles),
        "autotune": {k: v for k, v in seen.items() if k not in ("index", "config")},
        "contiguous": isinstance(out, torch.Tensor) and out.is_contiguous(),
        "changed_after_kernels": changed,
        "inputs_changed": _inputs_changed(roles, originals, box.get("log")),
        "launches": list(box.get("launches", [])),
    }
    if made is not None:
        result["made"] = made.big[:5]
    return result


def _bytes(lo: int, hi: int) -> bytes:
    """A CPU tensor's extent, read without a torch operation."""
    import ctypes

    return ctypes.string_at(lo, hi - lo) if hi > lo else b""


def _inputs_changed(roles: dict, originals: dict, log) -> list[str]:
    """The inputs whose bytes differ from those made for the case, when a launch started or
    when the function returned: an input written before the kernel read it (the result
    computed with torch into x, then copied by the kernel), even if restored afterwards."""
    changed = []
    for name in originals:
        lo, hi = roles[name]
        seen = [_bytes(lo, hi)] + (log.bytes_before_kernels(lo, hi) if log is not None else [])
        if any(one != originals[name] for one in seen):
            changed.append(name)
    return changed


def _changed_after_kernels(out: torch.Tensor, log) -> bool:
    """Whether the returned CPU tensor's bytes differ from those the last launch that had it
    as an argument left there: something else (a torch operation, ``out[i] = ...``, a numpy
    view) wrote it after the kernel. False where no launch had it (judged elsewhere)."""
    import ctypes

    if log is None or out.device.type != "cpu" or out.numel() == 0:
        return False
    lo, hi = _span(out)
    before = log.bytes_after_kernels(lo, hi)
    return before is not None and ctypes.string_at(lo, hi - lo) != before


def _probe_cases(fn, kind: str, specs: list) -> list[dict]:
    """Probe: :func:`_counted_call` for each case (the launches it recorded left out)."""
    cases = [_counted_call(fn, kind, tuple(spec)) for spec in specs]
    for one in cases:
        one.pop("launches", None)
    return cases


def _for_compiling(launches: list[dict]) -> list[dict]:
    """The launches worth compiling: one per kernel, pointer types, ``num_warps`` /
    ``num_stages`` and constexpr values other than 1 and None (Triton also specializes an int
    argument equal to 1, or None, into a constexpr: of the launches that differ only there, the
    one with the fewest constexprs, the general one, is kept), at most :data:`MAX_COMPILED`."""
    chosen: dict[tuple, dict] = {}
    for launch in launches:
        pointers = tuple(v for v in launch.get("signature", {}).values() if str(v).startswith("*"))
        values = tuple(
            sorted(
                (str(k), repr(v))
                for k, v in launch.get("constexprs", {}).items()
                if v is not None and v != 1
            )
        )
        key = (
            launch.get("kernel"),
            pointers,
            launch.get("num_warps"),
            launch.get("num_stages"),
            values,
        )
        best = chosen.get(key)
        if best is None or len(launch.get("constexprs", {})) < len(best.get("constexprs", {})):
            chosen[key] = launch
    return list(chosen.values())[:MAX_COMPILED]


def _compile(launches: list[dict]) -> dict:
    """Compile ``launches`` for sm_90 and sm_80 (:func:`~grader.runtime.triton_compile.
    compile_launches`, a fresh process), keeping what the checks judge and show."""
    picked = _for_compiling(launches)  # already chosen by the probes: a no-op there
    try:
        results = triton_compile.compile_launches(picked, timeout_s=COMPILE_TIMEOUT_S)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - reported, never the student's fault
        return {"launches": len(picked), "results": [], "error": f"{type(exc).__name__}: {exc}"}
    keep = ("kernel", "arch", "ok", "stage", "error", "registers", "spills", "shared_bytes",
            "num_warps", "num_stages", "occupancy", "dots", "launch")  # fmt: skip
    for one in results:
        launch = picked[one["launch"]]
        one["pointers"] = [
            v for v in launch.get("signature", {}).values() if str(v).startswith("*")
        ]
    return {
        "launches": len(picked),
        "results": [{k: one.get(k) for k in (*keep, "pointers")} for one in results],
    }


def _probe_cases_compiled(fn, kind: str, specs: list) -> dict:
    """Probe: :func:`_probe_cases`, with the kernels those cases launched, chosen for compiling
    (:func:`_for_compiling`), beside them: the check judges the cases first and compiles only
    an answer they pass (:func:`_compiled`), so a wrong answer costs no compile."""
    cases = [_counted_call(fn, kind, tuple(spec)) for spec in specs]
    launches = [launch for one in cases for launch in one.pop("launches", [])]
    return {"cases": cases, "launches": _for_compiling(launches)}


def _probe_compile(fn, launches: list) -> dict:
    """Probe: ``launches`` (recorded by an earlier probe of the same answer) compiled for sm_90
    and sm_80 where the answer lives (:func:`_compile`: a fresh process, sandboxed like the
    student's kernel: re-creating a kernel runs its ``def``)."""
    return _compile(launches)


def _compiled(fn, launches: list, name: str) -> dict:
    """The compile results of ``launches`` (plain data), through the student's handle ``fn``."""
    return call_student(fn.probe, _probe_compile, launches, name=f"{name} (compiled)")


def _describe_config(config) -> dict:
    """A ``triton.Config`` as plain data."""
    return {
        "kwargs": {
            str(k): v
            for k, v in dict(getattr(config, "kwargs", {}) or {}).items()
            if isinstance(v, (int, float, bool, str)) or v is None
        },  # fmt: skip
        "num_warps": getattr(config, "num_warps", None),
        "num_stages": getattr(config, "num_stages", None),
        "text": str(config)[:200],
    }


def _probe_matmul_configs(matmul, specs: list) -> dict:
    """Probe: the student's GPU configs, ``matmul_configs(True)`` (the function defined beside
    ``matmul``, found in its globals), described, and the cases ``specs`` run under each of
    them in turn (at most :data:`MAX_GPU_CONFIGS`) through the interpreter: block sizes as
    given; ``num_warps`` and ``num_stages`` mean nothing there."""
    configs_fn = getattr(matmul, "__globals__", {}).get("matmul_configs")
    if not callable(configs_fn):
        return {"call": {"ok": True, "value": None}, "missing": True}
    try:
        configs = list(configs_fn(True))
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the outcome is the record
        return {"call": {"ok": False, "error": handover.describe(exc)}}
    ok = all(type(c).__name__ == "Config" for c in configs)
    described = [_describe_config(c) for c in configs] if ok else [repr(c)[:100] for c in configs]
    result: dict = {"call": {"ok": True, "value": None}, "configs": described, "runs": []}
    if ok:
        launches = []
        for i, config in enumerate(configs[:MAX_GPU_CONFIGS]):
            runs = [_counted_call(matmul, "matmul", tuple(spec), config=config) for spec in specs]
            for one in runs:
                recorded = one.pop("launches", [])
                # every config compiled in float16 (the GPU's dtype for a matmul); float32 for
                # the first config only: the precision of its tl.dot is the code's, not the
                # config's, and each compile costs seconds
                launches += [
                    launch
                    for launch in recorded
                    if i == 0 or "*fp32" not in launch.get("signature", {}).values()
                ]
            result["runs"].append(runs)
        result["launches"] = _for_compiling(launches)
    return result


# --------------------------------------------------------------------------- judging
def _label(kind: str, spec: tuple) -> str:
    """The case in words, as the failure messages name it."""
    if kind == "bias_gelu":
        scale = f", x = {spec[3]:g} x randn" if len(spec) > 3 else ""
        return f"{kind}(x of shape ({spec[0]}, {spec[1]}), bias of shape ({spec[1]},){scale})"
    if kind == "softmax_rows":
        m, n, stride, offset = spec[:4]
        extra = f", row stride {stride}" if stride != n else ""
        extra += f", values near {offset:g}" if offset else ""
        extra += f", values spread by {spec[5]:g} x randn" if len(spec) > 5 else ""
        return f"{kind}(x of shape ({m}, {n}){extra})"
    if kind == "matmul":
        m, k, n, dtype, layout, _ = spec
        views = {
            "t": "a transposed view (stride {})",
            "s": "the first columns of a wider tensor (stride {})",
            "g": "every other column of a wider tensor (stride {})",
        }
        strides = {"a": {"t": (1, m), "s": (k + 5, 1), "g": (2 * k, 2)},
                   "b": {"t": (1, k), "s": (n + 5, 1), "g": (2 * n, 2)}}  # fmt: skip
        extra = "".join(
            f", {name} " + views[how].format(strides[name][how])
            for name, how in zip("ab", layout)
            if how != "n"
        )
        return f"{kind}(a ({m}, {k}), b ({k}, {n}), {dtype}{extra})"
    length, s, d = spec[:3]
    pad = spec[4] if len(spec) > 4 else 0
    pads = tuple(pad) if isinstance(pad, (tuple, list)) else (pad, pad, pad)
    if any(pads):
        extra = ", row strides (q, k, v) " + str(tuple(d + p for p in pads))
    else:
        extra = ""
    extra += f", q scaled by {spec[5]:g}" if len(spec) > 5 and spec[5] != 1 else ""
    if len(spec) > 6 and spec[6]:
        extra += (
            ", the odd queries' scores very negative (near -160), the even ones' near 0"
            if spec[6] == "mixed"
            else ", every score very negative (near -160)"
        )
    return f"{kind}(q ({length}, {d}), k and v ({s}, {d}){extra})"


def _judge_run(kind: str, spec: tuple, seen: dict, launches: str = "one") -> torch.Tensor:
    """What every case checks: the call, the returned tensor, no lane out of bounds, the output
    fully written by kernels, no torch-made stand-in. Returns the output."""
    label = _label(kind, spec)
    out = call_student(lambda: outcome(seen["call"]), name=label)
    args = make_inputs(kind, spec)
    if kind == "matmul":
        want_shape = (args[0].shape[0], args[1].shape[1])
    else:
        want_shape = tuple(args[0].shape)
    want_dtype = args[0].dtype
    require(
        isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(want_shape),
        f"{label} must return a tensor of shape {tuple(want_shape)}",
        yours=tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__,
        expected=tuple(want_shape),
        cause="allocate the output with the right shape (torch.empty) and return it",
    )
    require(
        out.dtype == want_dtype,
        f"{label} must return {want_dtype}",
        yours=out.dtype,
        expected=want_dtype,
        cause="allocate the output in the inputs' dtype; convert in the kernel before tl.store "
        "(acc.to(c_ptr.dtype.element_ty))",
    )
    traffic = seen["traffic"]
    if traffic["oob_lanes"]:
        fail(
            f"{label}: a kernel reached outside the tensors it was given "
            f"({traffic['oob_lanes']} lane(s))",
            yours=traffic["oob"][0],
            expected="every unmasked lane of every tl.load and tl.store inside its tensor",
            cause=MASK_CAUSE,
        )
    if out.numel() == 0:
        return out
    require(
        bool(traffic["launches"]),
        f"{label} launched no Triton kernel",
        yours="no launch",
        expected="one kernel launch" if launches == "one" else "a kernel launch",
        cause="compute the result in your @triton.jit kernel, launched as kernel[grid](...), "
        "not with torch operations",
    )
    if launches == "one":
        require(
            len(traffic["launches"]) == 1,
            f"{label} must launch one kernel (the point of fusing)",
            yours=traffic["launches"],
            expected="one launch",
            cause="do the whole operation in one kernel: each launch reads its inputs from "
            "memory and writes its outputs back",
        )
    changed = seen.get("inputs_changed", [])
    require(
        not changed,
        f"{label}: the function changed its input(s) {', '.join(changed)}",
        yours=f"{', '.join(changed)} not as given when a kernel started or when it returned",
        expected="the inputs left as they are (read only)",
        cause="write results into a new output tensor, never into the inputs (a result "
        "computed with torch into an input and copied by the kernel is torch's work)",
    )
    require(
        not seen.get("changed_after_kernels"),
        f"{label}: the output was changed after the kernel stored it",
        yours="values written into the output by something other than the kernel, after "
        "its launch (a torch operation, out.copy_(...), out[i] = ..., a numpy view)",
        expected="the output exactly as the kernel left it",
        cause="compute the result in the kernel: a kernel that only loads the inputs and "
        "stores placeholders, with torch filling the output afterwards, is torch's work, "
        "not the kernel's",
    )
    out_row = traffic["roles"].get("out", {})
    require(
        out_row.get("loaded", 0) == 0,
        f"{label}: the kernel read the output",
        yours=f"{out_row.get('loaded', 0)} bytes loaded from the returned tensor",
        expected="the output only stored, never loaded",
        cause="the output holds something before the kernel runs (a result computed with "
        "torch, then read back and stored by the kernel?): compute the values in the kernel "
        "from the inputs and store them once",
    )
    written = out_row.get("distinct_stored", 0)
    require(
        written == out.numel() * out.element_size(),
        f"{label}: the kernel wrote only part of the output",
        yours=f"{written} of its {out.numel() * out.element_size()} bytes written "
        f"(grid {[g for _, g in traffic['launches']]})",
        expected="every byte of the output written by a kernel",
        cause=GRID_CAUSE,
    )
    return out


#: The likely cause of inf/nan where loads without ``other`` had masked-off lanes.
UNDEFINED_LANES_CAUSE = (
    "{n} masked-off lanes were loaded without other=: tl.load leaves them undefined (its "
    "docstring; on a GPU they hold whatever the registers held, and the checks fill them with "
    "NaN), and your result used them (a product with a zero probability or a zero-padded "
    "operand, a max or a sum over them): give every masked tl.load the value its lanes need, "
    "other=0.0 for a dot product or a sum, other=-float('inf') where a max or exp follows. "
)


def with_undefined_lanes(cause, seen: dict):
    """``cause`` (text or ``cause(finite, where)``) for :func:`_require_close`, led by
    :data:`UNDEFINED_LANES_CAUSE` when the result is not finite and the run's loads without
    ``other`` had masked-off lanes (``seen["traffic"]["undefined_lanes"]``)."""
    lanes = (seen.get("traffic") or {}).get("undefined_lanes", 0)

    def combined(finite: bool, where: tuple) -> str:
        text = cause(finite, where) if callable(cause) else cause
        return text if finite or not lanes else UNDEFINED_LANES_CAUSE.format(n=lanes) + text

    return combined


def _require_close(
    kind: str, spec: tuple, got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float, cause
) -> None:
    got64, want64 = got.double(), want.double()
    bad = ~torch.isclose(got64, want64, rtol=rtol, atol=atol)
    if not bad.any():
        return
    where = tuple(int(i) for i in bad.nonzero()[0])
    finite = bool(torch.isfinite(got64).all())
    fail(
        f"{_label(kind, spec)}: wrong values ({int(bad.sum())} of {got.numel()} elements)",
        yours=f"at {where}: {got64[where].item():.6g}"
        + ("" if finite else f" ({int((~torch.isfinite(got64)).sum())} inf/nan)"),
        expected=f"{want64[where].item():.6g} (within rtol={rtol:g}, atol={atol:g})",
        cause=cause(finite, where) if callable(cause) else cause,
    )


def _role(traffic: dict, role: str) -> dict:
    return traffic["roles"].get(
        role, {"loaded": 0, "stored": 0, "distinct_loaded": 0, "distinct_stored": 0, "nbytes": 0}
    )


def _require_stores_exactly_output(kind: str, spec: tuple, traffic: dict, out_bytes: int) -> None:
    require(
        traffic["stores"] == out_bytes,
        f"{_label(kind, spec)}: the kernels stored {traffic['stores']} bytes",
        yours=f"{traffic['stores']} bytes stored (output: {_role(traffic, 'out')['stored']}, "
        f"other tensors: {_role(traffic, 'other')['stored']})",
        expected=f"exactly the output's {out_bytes} bytes, each once",
        cause="the kernel writes something besides the output, or writes it twice: an "
        "intermediate stored to memory (and read back) is what fusion avoids; keep it in "
        "registers",
    )


# --------------------------------------------------------------------------- compiled
#: At most this many kernel variants are compiled per check (each for two architectures).
MAX_COMPILED = 12
#: Seconds for one check's compile process (a fresh Python, triton imported, every variant for
#: sm_90 and sm_80: 1 to 5 s on 2 cores, cold cache, for 4 kernels; measured 2026-11-27).
COMPILE_TIMEOUT_S = 240.0
#: ``tl.dot`` input precisions that keep float32 products to about float32 accuracy on a GPU
#: (triton 3.8's ``tl.dot`` docstring: "tf32" is the default; "tf32x3" and "bf16x6" split each
#: operand into several lower-precision ones; "ieee" uses exact float32 products).
FLOAT32_PRECISIONS = ("ieee", "tf32x3", "bf16x6")


def _judge_compiled(
    what: str, compiled: dict, float32_exact: bool = False, every_variant: bool = True
) -> str:
    """Judge the compile results of a check's kernels: a kernel the compiler rejects for sm_90
    or sm_80 fails with the compiler's message; one that compiles but that a GPU would refuse
    to launch (more shared memory or registers than it has) fails where ``every_variant`` (a
    plain kernel), and fails only when every variant is refused on an architecture where not
    (autotune configs: the autotuner skips the configs a GPU cannot launch); with
    ``float32_exact``, a ``tl.dot`` on float32 operands must use a float32-accurate precision.
    A kernel the course could not re-create or compile here (its own limits, a timeout) is
    reported, not failed.

    Returns:
        One line of compiler facts for the pass message.
    """
    results = compiled.get("results", [])
    for one in results:
        if one["stage"] == "compile":
            fail(
                f"{what}: the Triton compiler rejects {one['kernel']} for {one['arch']} "
                "(the interpreter ran it, a GPU would not)",
                yours=one["error"],
                expected="a kernel that compiles for sm_90 (H100) and sm_80 (A100)",
                cause="the interpreter runs your kernel as Python, the compiler types it: a "
                "loop-carried value must keep its type and shape (start a running max as a "
                "block, tl.full((BLOCK,), -float('inf'), tl.float32), not as the scalar 0.0), "
                "tl.dot's inner dimension needs at least 16 (16-bit) or 8 (float32) elements, "
                "and a kernel reads only tl.constexpr globals",
            )
    refused = [one for one in results if one["stage"] == "launch"]
    if refused and every_variant:
        one = refused[0]
        fail(
            f"{what}: {one['kernel']} compiles for {one['arch']} but a GPU of that kind would "
            "refuse to launch it",
            yours=f"{one['error']} ({one['shared_bytes']} bytes of shared memory, "
            f"{one['registers']} registers per thread, {one['num_warps']} warps)",
            expected="a block that fits the SM (sm_90: 227 KB of shared memory per block, "
            "sm_80: 163 KB; 65536 registers per SM)",
            cause="blocks too large for the GPU: smaller BLOCK sizes, fewer num_stages (each "
            "stage keeps one more tile of every input in shared memory), or fewer warps",
        )
    if refused and not every_variant:
        for arch in {one["arch"] for one in results}:
            mine = [one for one in results if one["arch"] == arch]
            if mine and all(one["stage"] == "launch" for one in mine):
                fail(
                    f"{what}: none of your GPU configs would launch on {arch}",
                    yours="; ".join(f"{one['error']}" for one in mine[:3]),
                    expected="at least one config that fits the SM",
                    cause="every config needs more shared memory (or registers) than the GPU "
                    "has: smaller tiles or fewer num_stages",
                )
    if float32_exact:
        for one in results:
            for dot in one.get("dots") or []:
                if dot["a"] == "f32" and dot["precision"] not in FLOAT32_PRECISIONS:
                    fail(
                        f"{what}: {one['kernel']}'s tl.dot on float32 inputs compiles to "
                        f"{dot['precision']} products for {one['arch']}",
                        yours=f"input_precision {dot['precision']!r} (TF32: 10 mantissa "
                        "bits, about 1e-3 relative on a GPU)",
                        expected="input_precision 'tf32x3' or 'ieee' for float32 inputs (the "
                        "contract: float32 results to float32 accuracy on a GPU too)",
                        cause="tl.dot's default on float32 is TF32 on GPUs with Tensor Cores; "
                        "the interpreter computes exact float32, so only the compiled kernel "
                        "shows it. Pass input_precision='tf32x3' (or 'ieee') when the inputs "
                        "are float32, e.g. through a tl.constexpr chosen by the launcher",
                    )
    return _compiled_facts(compiled)


def _compiled_facts(compiled: dict) -> str:
    """The compiler's figures in one line: per kernel and architecture, registers per thread,
    spilled bytes, shared memory and the warps an SM can hold (compiled, not measured)."""
    results = [one for one in compiled.get("results", []) if one["stage"] == "compiled"]
    if compiled.get("error"):
        return f"not compiled here ({compiled['error']})"
    if not results:
        skipped = [one for one in compiled.get("results", []) if one["stage"] != "compiled"]
        if skipped:
            return f"not compiled here ({skipped[0]['stage']}: {skipped[0]['error']})"
        return "no kernel compiled"
    parts = []
    seen = set()
    for one in results:
        key = (one["kernel"], one["arch"])
        if key in seen:
            continue
        seen.add(key)
        occ = one.get("occupancy") or {}
        warps = occ.get("warps_per_sm")
        parts.append(
            f"{one['kernel']} {one['arch']}: {one['registers']} registers, {one['spills']} B "
            f"spilled, {one['shared_bytes']} B shared"
            + (f", {warps} warps/SM" if warps is not None else "")
        )
    return "compiled (not measured): " + "; ".join(parts[:4])


# --------------------------------------------------------------------------- bias_gelu
#: (M, N, seed[, scale]): N not a multiple of any power-of-two block, one element, a single row,
#: empty, and values of 60 x randn: tanh(u) written as (exp(2u) - 1) / (exp(2u) + 1) overflows
#: float32 there (inf / inf = nan); tl.sigmoid, or tanh from exp(-2|u|), does not.
BIAS_GELU_CASES = [
    (37, 300, 1), (64, 128, 2), (1, 1, 3), (1, 1000, 4), (130, 7, 5), (0, 5, 6), (9, 50, 7, 60.0),
]  # fmt: skip
BIAS_GELU_HIDDEN = [(200, 33, 11), (3, 2049, 12), (17, 17, 13)]
#: The hidden checks also draw this many cases each from the whole domain (:func:`draw_cases`).
BIAS_GELU_DRAWS = SOFTMAX_DRAWS = ATTENTION_DRAWS = 10


def bias_gelu_bounds(m: int, n: int) -> dict[str, tuple[int, int]]:
    """The bytes bias_gelu's kernel may move, as ``(least, most)`` per tensor (float32):

    * ``x``: exactly its ``M*N*4`` bytes, each element loaded once;
    * ``bias``: at least its ``N*4`` bytes (each element once), at most ``M*N*4`` (once per
      output element: a program may reload the bias for its rows; a flat 1-D kernel that loads
      ``bias[offsets % N]`` for every element reaches the maximum; a 2-D one loads it once per
      block of rows);
    * the output: exactly ``M*N*4`` bytes stored; nothing else stored.
    """
    return {"x": (m * n * 4, m * n * 4), "bias": (n * 4, m * n * 4), "out": (m * n * 4, m * n * 4)}


def _bias_gelu_overflow(args: tuple, where: tuple) -> str:
    """Why a bias_gelu element came out inf or nan: h there, and what overflows."""
    x, bias = args
    h = float(x[where] + bias[where[1]])
    two_u = 2 * 0.7978845608028654 * (h + 0.044715 * h**3)
    return (
        f"inf/nan where h = x + bias = {h:.4g}: there 2u = {two_u:.4g}, and exp(2u) (or "
        "exp(-2u)) overflows float32 to inf beyond about 88.7, so tanh(u) written as "
        "(exp(2u) - 1) / (exp(2u) + 1) is inf / inf = nan. Use tl.sigmoid(2u) "
        "(0.5 * (1 + tanh(u)) = sigmoid(2u)), or a form whose exp cannot overflow "
        "(tanh(u) = sign(u) * (1 - exp(-2|u|)) / (1 + exp(-2|u|))); "
    )


def _judge_bias_gelu(spec: tuple, seen: dict) -> None:
    out = _judge_run("bias_gelu", spec, seen)
    args = make_inputs("bias_gelu", spec)
    _require_close(
        "bias_gelu", spec, out, expected("bias_gelu", args), 1e-5, 1e-5,
        with_undefined_lanes(lambda finite, where: (
            "" if finite else _bias_gelu_overflow(args, where)) +
        "GELU's tanh form: h = x + bias (bias broadcast over rows: bias[col]), then "
        "0.5 * h * (1 + tanh(0.7978845608 * (h + 0.044715 * h**3))), which equals "
        "h * sigmoid(2 * 0.7978845608 * (h + 0.044715 * h**3)); check the column index of the "
        "bias (offsets % N for a flat index) and the constants", seen),
    )  # fmt: skip
    if out.numel() == 0:
        return
    m, n = spec[:2]
    bounds = bias_gelu_bounds(m, n)
    traffic = seen["traffic"]
    x_row, b_row = _role(traffic, "x"), _role(traffic, "bias")
    require(
        x_row["loaded"] == bounds["x"][0],
        f"{_label('bias_gelu', spec)}: x loaded {x_row['loaded']} bytes",
        yours=f"{x_row['loaded']} bytes of x loaded (x is {m * n * 4} bytes)",
        expected=f"exactly {bounds['x'][0]}: each element of x loaded once",
        cause="load each element of x once and compute everything from that value; a second "
        "tl.load of the same block (or loads from a copy of x) moves the bytes again",
    )
    lo, hi = bounds["bias"]
    require(
        lo <= b_row["loaded"] <= hi,
        f"{_label('bias_gelu', spec)}: bias loaded {b_row['loaded']} bytes",
        yours=f"{b_row['loaded']} bytes of bias loaded",
        expected=f"from {lo} (each bias element once) to {hi} (once per output element)",
        cause="load the bias block once per program (a 2-D kernel) or once per element "
        "(bias[offsets % N] in a flat one); read from the bias argument itself",
    )
    other = _role(traffic, "other")
    require(
        other["loaded"] == 0,
        f"{_label('bias_gelu', spec)}: the kernel read another tensor",
        yours=f"{other['loaded']} bytes loaded from {other.get('names', [])}",
        expected="loads from x and bias only",
        cause="pass x and bias themselves to the kernel (no copy, no intermediate tensor)",
    )
    _require_stores_exactly_output("bias_gelu", spec, traffic, m * n * 4)


def check_bias_gelu(bias_gelu) -> None:
    """Check values against ``F.gelu(x + bias, approximate="tanh")`` on shapes whose N is not a
    multiple of the block, one element and empty; one launch; no lane out of bounds; the whole
    output written; bytes as :func:`bias_gelu_bounds` allows.

    Raises:
        CheckFailed: the first case that differs, with the likely cause.
    """
    fn = student(bias_gelu, "bias_gelu")
    got = call_student(
        fn.probe, _probe_cases_compiled, "bias_gelu", BIAS_GELU_CASES, name="bias_gelu"
    )
    for spec, one in zip(BIAS_GELU_CASES, got["cases"]):
        _judge_bias_gelu(spec, one)
    facts = _judge_compiled("bias_gelu", _compiled(fn, got["launches"], "bias_gelu"))
    passed(
        f"bias_gelu: {len(BIAS_GELU_CASES)} shapes, one launch each, x read once, only the "
        f"output stored, every lane in bounds; {facts}"
    )


def _reference_counted(kind: str, specs: list) -> list[dict]:
    """The reference solution's runs of the same cases, in this process, counted alike."""
    ref = getattr(reference(ASSIGNMENT), kind)
    return [_counted_call(ref, kind, tuple(s)) for s in specs]


def _require_same_as_reference(kind: str, specs: list, seen: list, judge, tol) -> None:
    """Judge each case, then compare with the reference's output: ``tol`` is a dict of
    ``rtol``/``atol`` or a function of the case's inputs returning ``(rtol, atol)``."""
    refs = _reference_counted(kind, specs)
    for spec, one, ref in zip(specs, seen, refs):
        judge(spec, one)
        want = outcome(ref["call"])
        got = outcome(one["call"])
        rtol, atol = tol(make_inputs(kind, spec)) if callable(tol) else (tol["rtol"], tol["atol"])
        _require_close(kind, spec, got, want, rtol, atol, "differs from the reference")


def check_bias_gelu_hidden(bias_gelu) -> None:
    """Hidden: more shapes, against the reference solution's kernel run alike."""
    fn = student(bias_gelu, "bias_gelu")
    specs = BIAS_GELU_HIDDEN + draw_cases("bias_gelu", 1, BIAS_GELU_DRAWS)
    seen = call_student(fn.probe, _probe_cases, "bias_gelu", specs, name="bias_gelu")
    _require_same_as_reference(
        "bias_gelu", specs, seen, _judge_bias_gelu, {"rtol": 1e-5, "atol": 1e-5}
    )
    passed(f"bias_gelu: {len(specs)} hidden cases as torch and the reference")


# --------------------------------------------------------------------------- softmax_rows
#: (M, N, row stride, offset, seed[, spread]): N not a power of two, strided rows (a column
#: slice), large values (exp overflows without subtracting the max), one element, N = 1, empty,
#: and rows whose values spread over hundreds (100 x randn): subtracting anything but the
#: row's max (its first element, its mean) leaves differences above 88, where exp overflows.
SOFTMAX_CASES = [
    (6, 100, 100, 0.0, 1),
    (9, 37, 64, 0.0, 2),
    (5, 128, 128, 0.0, 3),
    (4, 300, 300, 1e4, 4),
    (3, 50, 80, -1e4, 5),
    (1, 1, 1, 0.0, 6),
    (7, 1, 3, 0.0, 7),
    (0, 16, 16, 0.0, 8),
    (4, 200, 200, 0.0, 9, 100.0),
]
SOFTMAX_HIDDEN = [(33, 1000, 1024, 100.0, 11), (2, 4096, 4096, 0.0, 12), (12, 3, 3, 0.0, 13)]


def _nonfinite_softmax_cause(row_max: float, row_min: float) -> str:
    """Why a softmax row came out inf or nan, from the row's values: ``exp`` overflows float32
    above about 88.7 (inf, then inf/inf = nan), and underflows to 0 below about -103.9 (every
    lane 0, then 0/0 = nan)."""
    if row_max > 88.0:
        what = (
            f"exp overflowed: this row's values reach {row_max:.4g}, and exp(x) is inf in "
            "float32 above about 88.7, so inf/inf = nan"
        )
    elif row_max < -87.0:
        what = (
            f"exp underflowed: every value of this row is at most {row_max:.4g}, so every "
            "exp(x) rounds to 0 in float32 (below about -104) and the quotient is 0/0 = nan"
        )
    else:
        what = (
            f"this row's values span [{row_min:.4g}, {row_max:.4g}]: exp of (x - c) overflows "
            "where x - c is above 88.7 (c below the max) and every lane underflows to 0 where "
            "all x - c are below -104 (c above the max), giving inf/inf or 0/0"
        )
    return what + "; subtract the row's max (the only c for which the largest exp is 1)"


def _softmax_cause(spec: tuple):
    m, n, stride, offset = spec[:4]

    def cause(finite: bool, where: tuple) -> str:
        if not finite:
            (x,) = make_inputs("softmax_rows", spec)
            row = x[where[0]]
            return "numerically unstable: " + _nonfinite_softmax_cause(
                float(row.max()), float(row.min())
            )
        if stride != n:
            return (
                "the rows are strided (x.stride(0) != N): address row r at "
                "x_ptr + r * x.stride(0), not r * N"
            )
        if n & (n - 1):
            return (
                "N is not a power of two, so the block has masked lanes: load them with "
                "other=-float('inf'), so that they add exp(-inf) = 0 to the sum and never win "
                "the max (with other=0 they count in the sum)"
            )
        return "softmax(x)[i] = exp(x[i] - max(x)) / sum_j exp(x[j] - max(x)), per row"

    return cause


def _judge_softmax(spec: tuple, seen: dict) -> None:
    out = _judge_run("softmax_rows", spec, seen)
    args = make_inputs("softmax_rows", spec)
    _require_close(
        "softmax_rows", spec, out, expected("softmax_rows", args), 1e-5, 1e-6,
        with_undefined_lanes(_softmax_cause(spec), seen),
    )  # fmt: skip
    require(
        seen["contiguous"],
        f"{_label('softmax_rows', spec)} must return a contiguous tensor",
        yours="not contiguous",
        expected="contiguous (M, N)",
        cause="allocate the output with torch.empty((M, N), ...)",
    )
    if out.numel() == 0:
        return
    m, n = spec[0], spec[1]
    traffic = seen["traffic"]
    x_row, other = _role(traffic, "x"), _role(traffic, "other")
    require(
        other["loaded"] == 0,
        f"{_label('softmax_rows', spec)}: the kernel read a copy of x, not x",
        yours=f"{other['loaded']} bytes loaded from {other.get('names', [])}",
        expected="loads from x itself",
        cause="x.contiguous() (or a clone) copies x before the kernel: one more read and write "
        "of all of it. Pass x and its row stride, x.stride(0), to the kernel",
    )
    require(
        x_row["loaded"] == m * n * 4,
        f"{_label('softmax_rows', spec)}: x loaded {x_row['loaded']} bytes",
        yours=f"{x_row['loaded']} bytes ({x_row['loaded'] / (m * n * 4):.2g} x the rows' "
        f"{m * n * 4} bytes)",
        expected=f"{m * n * 4}: each row read once",
        cause="the row is loaded more than once (a pass for the max, another for the sum, "
        "another for the output): load it once into a block (BLOCK = "
        "triton.next_power_of_2(N) lanes) and compute max, exp, sum and the quotient from "
        "that block",
    )
    _require_stores_exactly_output("softmax_rows", spec, traffic, m * n * 4)


def check_softmax_rows(softmax_rows) -> None:
    """Check values against ``torch.softmax`` on rows whose N is not a power of two, strided
    rows, values offset by ±1e4 or spread by 100 x randn (no inf or nan allowed), one element
    and empty; one launch; every lane in bounds; x itself read exactly once (``M*N*4`` bytes loaded, not twice that),
    only the output stored (``M*N*4`` bytes).

    Raises:
        CheckFailed: the first case that differs, with the likely cause.
    """
    fn = student(softmax_rows, "softmax_rows")
    got = call_student(
        fn.probe, _probe_cases_compiled, "softmax_rows", SOFTMAX_CASES, name="softmax_rows"
    )
    for spec, one in zip(SOFTMAX_CASES, got["cases"]):
        _judge_softmax(spec, one)
    facts = _judge_compiled("softmax_rows", _compiled(fn, got["launches"], "softmax_rows"))
    passed(
        f"softmax_rows: {len(SOFTMAX_CASES)} cases (strided rows, values near ±1e4, rows "
        f"spread wide), each row read once; {facts}"
    )


def check_softmax_rows_hidden(softmax_rows) -> None:
    """Hidden: more shapes (N = 4096, large offsets), against the reference run alike."""
    fn = student(softmax_rows, "softmax_rows")
    specs = SOFTMAX_HIDDEN + draw_cases("softmax_rows", 1, SOFTMAX_DRAWS)
    seen = call_student(fn.probe, _probe_cases, "softmax_rows", specs, name="softmax_rows")
    _require_same_as_reference(
        "softmax_rows", specs, seen, _judge_softmax, {"rtol": 1e-5, "atol": 1e-6}
    )
    passed(f"softmax_rows: {len(specs)} hidden cases as torch and the reference")


# --------------------------------------------------------------------------- matmul
#: (M, K, N, dtype, layout, seed). The last case: K = 1024 in float16, where a float16
#: accumulator is visibly off (about 0.07 to 0.1 beyond the tolerance, measured with the
#: interpreter) while a float32 one is within rounding of the float64 product.
MATMUL_CASES = [
    (32, 32, 32, "float32", "nn", 1),
    (40, 50, 36, "float32", "nn", 2),
    (1, 1, 1, "float32", "nn", 3),
    (33, 70, 17, "float32", "nt", 4),
    (20, 45, 30, "float32", "tn", 5),
    (48, 64, 40, "float16", "nn", 6),
    (16, 1024, 24, "float16", "nn", 7),
    (37, 45, 29, "float32", "gs", 8),
]
MATMUL_HIDDEN = [(70, 33, 65, "float32", "nt", 11), (5, 200, 3, "float16", "tn", 12)]
#: The hidden check also draws this many cases from the whole domain (:func:`draw_cases`).
MATMUL_DRAWS = 10
#: The largest K the statement allows (a float32 accumulator keeps float16 results within the
#: tolerance there; a float16 one does not).
MATMUL_MAX_K = 4096
#: The cases every one of the student's GPU configs runs through the interpreter: sizes no
#: block of 16 to 256 divides, float32 with a transposed a and a column slice b, float16 with
#: every other column of a.
MATMUL_CONFIG_CASES = [(70, 100, 90, "float32", "ts", 21), (33, 200, 47, "float16", "gn", 22)]
#: At most this many GPU configs are run (each one is a full interpreted run).
MAX_GPU_CONFIGS = 8
#: Tolerances against the float64 product. float32: exact products, float32 sums in another
#: order. float16: the result rounded to float16 (half an ulp is 2**-11 relative) after a
#: float32 sum.
MATMUL_TOL = {"float32": (1e-4, 1e-4), "float16": (1e-3, 1e-2)}


def _matmul_cause(spec: tuple):
    m, k, n, dtype, layout, _ = spec

    def cause(finite: bool, where: tuple) -> str:
        views = [name for name, how in zip("ab", layout) if how != "n"]
        if views:
            names = " and ".join(views)
            return (
                f"wrong strides: {names} here {'is' if len(views) == 1 else 'are'} not "
                "contiguous (a transposed view, a column slice of a wider tensor, or every "
                "other column); address element (i, j) of a tensor x at x_ptr + i * "
                "x.stride(0) + j * x.stride(1), with both strides passed to the kernel, not "
                "i * (number of columns) + j"
            )
        if dtype == "float16" and k >= 512:
            return (
                f"a float16 accumulator: summing K = {k} products in float16 rounds after every "
                "block of K and loses about 3 significant bits here. Accumulate in float32 "
                "(acc = tl.zeros((BM, BN), dtype=tl.float32); acc = tl.dot(a, b, acc)) and "
                "convert once, at the store"
            )
        if m % 16 or n % 16 or k % 16:
            return (
                "shapes that are not multiples of the blocks: mask the loads of a and b in M, "
                "N and K with other=0.0 (a zero adds nothing to the dot product) and the store "
                "in M and N"
            )
        return "c[i, j] = sum_k a[i, k] * b[k, j]: check the tile offsets and the K loop"

    return cause


def _judge_matmul(spec: tuple, seen: dict) -> None:
    out = _judge_run("matmul", spec, seen, launches="one")
    args = make_inputs("matmul", spec)
    rtol, atol = MATMUL_TOL[spec[3]]
    _require_close(
        "matmul", spec, out, expected("matmul", args), rtol, atol,
        with_undefined_lanes(_matmul_cause(spec), seen),
    )  # fmt: skip
    require(
        seen["contiguous"],
        f"{_label('matmul', spec)} must return a contiguous tensor",
        yours="not contiguous",
        expected="contiguous (M, N)",
        cause="allocate c with torch.empty((M, N), ...)",
    )
    m, _, n, dtype, _, _ = spec
    traffic = seen["traffic"]
    other = _role(traffic, "other")
    require(
        other["loaded"] == 0,
        f"{_label('matmul', spec)}: the kernel read a copy of an input",
        yours=f"{other['loaded']} bytes loaded from {other.get('names', [])}",
        expected="loads from a and b themselves, whatever their strides",
        cause="a.contiguous() / b.contiguous() copies a transposed view before the kernel; "
        "pass the view and its strides (x.stride(0), x.stride(1)) instead",
    )
    for role in ("a", "b"):
        row = _role(traffic, role)
        require(
            row["distinct_loaded"] == row["nbytes"],
            f"{_label('matmul', spec)}: the kernel read only part of {role}",
            yours=f"{row['distinct_loaded']} of {row['nbytes']} bytes of {role} read",
            expected=f"all of {role}",
            cause="the K loop must cover all of K (range(0, K, BLOCK_K)) and the grid all "
            "tiles of c",
        )
    _require_stores_exactly_output(
        "matmul", spec, traffic, m * n * (2 if dtype == "float16" else 4)
    )


def _judge_matmul_autotune(seen: list) -> None:
    """The kernel is autotuned, with the statement's key."""
    require(
        all(one["autotune"].get("autotuned") for one in seen),
        "matmul must launch a kernel wrapped in @triton.autotune",
        yours="a plain @triton.jit kernel",
        expected="@triton.autotune(configs=matmul_configs(), key=['M', 'N', 'K'])",
        cause="the exercise asks for autotuned block sizes: the configs' BLOCK_M, BLOCK_N and "
        "BLOCK_K are passed to the kernel as tl.constexpr parameters",
    )
    keys = seen[0]["autotune"].get("keys", [])
    missing = [k for k in ("M", "N", "K") if k not in keys]
    require(
        not missing,
        f"matmul's @triton.autotune key leaves out {', '.join(missing)}",
        yours=f"key={keys}",
        expected="key=['M', 'N', 'K']",
        cause="the autotuner times its configs again for each new value of the key's "
        "arguments; without one of M, N, K a config chosen for one shape is reused for every "
        "other shape (a 128 x 256 tile chosen at 4096^3 for a 64 x 64 matrix)",
    )


def _judge_gpu_configs(found: dict) -> int:
    """The student's GPU configs: at least two ``triton.Config``, each right on every case.
    Returns how many ran."""
    require(
        not found.get("missing"),
        "matmul: no matmul_configs beside it",
        yours="matmul_configs is not defined where matmul is",
        expected="matmul_configs(gpu) in the same cell, returning your GPU configs for gpu=True",
        cause="keep the given matmul_configs(gpu) function and write your GPU list in it",
    )
    call_student(lambda: outcome(found["call"]), name="matmul_configs(True)")
    configs = found["configs"]
    require(
        all(isinstance(c, dict) for c in configs),
        "matmul_configs(True) must return a list of triton.Config",
        yours=configs[:3],
        expected="[triton.Config({'BLOCK_M': ..., 'BLOCK_N': ..., 'BLOCK_K': ...}, "
        "num_warps=..., num_stages=...), ...]",
        cause="build each config with triton.Config(kwargs, num_warps=..., num_stages=...)",
    )
    require(
        len(configs) >= 2,
        "matmul_configs(True) must give the autotuner several configs for a GPU",
        yours=f"{len(configs)} config(s)",
        expected="at least 2 (the Triton tutorial's matmul has 8)",
        cause="on a GPU the autotuner times every config on the first call for a new key and "
        "keeps the fastest: give it tiles of several shapes (e.g. 128 x 256 x 64 with 8 warps, "
        "64 x 128 x 32 with 4) and pipeline depths (num_stages)",
    )
    for i, runs in enumerate(found["runs"]):
        for spec, one in zip(MATMUL_CONFIG_CASES, runs):
            try:
                _judge_matmul(spec, one)
            except AssertionError as exc:
                raise type(exc)(
                    f"with your GPU config {i} ({configs[i]['text']}), run through the "
                    f"interpreter (block sizes as given): {exc}"
                ) from None
    return len(found["runs"])


def check_matmul(matmul) -> None:
    """Check values against the float64 product on shapes that are not multiples of the blocks,
    transposed views and column slices (any strides), float32 and float16 (K = 1024: a float16
    accumulator fails), one element; an autotuned kernel (``@triton.autotune``) launched once,
    with ``key`` naming M, N and K; every lane in bounds; only the output stored; then every
    one of the student's GPU configs (``matmul_configs(True)``, at least two) run through the
    interpreter on shapes no block divides, each right (the GPU may pick any).

    Raises:
        CheckFailed: the first case that differs, with the likely cause.
    """
    fn = student(matmul, "matmul")
    seen = call_student(fn.probe, _probe_cases, "matmul", MATMUL_CASES, name="matmul")
    for spec, one in zip(MATMUL_CASES, seen):
        _judge_matmul(spec, one)
    _judge_matmul_autotune(seen)
    found = call_student(
        fn.probe, _probe_matmul_configs, MATMUL_CONFIG_CASES, name="matmul (your GPU configs)"
    )
    ran = _judge_gpu_configs(found)
    facts = _judge_compiled(
        "matmul (your GPU configs)",
        _compiled(fn, found.get("launches", []), "matmul (your GPU configs)"),
        float32_exact=True,
        every_variant=False,
    )
    passed(
        f"matmul: {len(MATMUL_CASES)} cases (transposed views, column slices, float16 with "
        f"K = 1024), key {seen[0]['autotune'].get('keys')}, each of your {ran} GPU configs "
        f"right through the interpreter, every lane in bounds; {facts}"
    )


def check_matmul_hidden(matmul) -> None:
    """Hidden: more shapes and layouts, and :data:`MATMUL_DRAWS` cases drawn from the whole
    domain (every layout for a and b, K up to :data:`MATMUL_MAX_K`, float16 and float32),
    against the float64 product and the reference run alike."""
    specs = MATMUL_HIDDEN + draw_cases("matmul", 1, MATMUL_DRAWS)
    fn = student(matmul, "matmul")
    seen = call_student(fn.probe, _probe_cases, "matmul", specs, name="matmul")
    for spec, one in zip(specs, seen):
        _judge_matmul(spec, one)
    refs = _reference_counted("matmul", specs)
    for spec, one, ref in zip(specs, seen, refs):
        rtol, atol = MATMUL_TOL[spec[3]]
        _require_close(
            "matmul", spec, outcome(one["call"]), outcome(ref["call"]), rtol, 2 * atol,
            "differs from the reference",
        )  # fmt: skip
    passed(f"matmul: {len(specs)} hidden cases as the float64 product and the reference")


# --------------------------------------------------------------------------- attention_forward
#: (L, S, d, seed[, pad[, q_scale[, negative]]]): L and S not multiples of a block, one query,
#: one key, d = 16 and 32, rows strided (q, k, v column slices of wider tensors, as the contract
#: allows; the last case with a different row stride each), q scaled by 30 (scores in the
#: hundreds: exp overflows without the running max), every score very negative (a running
#: max started at 0 instead of -inf underflows every exp: 0/0), and queries of one block whose
#: scores differ by about 160 (a max over the whole block instead of each row underflows the
#: lower rows). Where L*S is larger than any
#: tensor the function needs (q, k, v, output), a tensor of L*S elements or more made by torch
#: is the score matrix (or bigger).
ATTENTION_CASES = [
    (48, 80, 16, 1),
    (33, 70, 32, 2),
    (1, 50, 16, 3),
    (40, 1, 16, 4),
    (64, 64, 16, 5),
    (33, 70, 16, 6, 16),
    (40, 70, 16, 7, 0, 30.0),
    (30, 50, 32, 8, (8, 0, 24), 1.0, True),
    (37, 45, 16, 9, 0, 1.0, "mixed"),
]
ATTENTION_HIDDEN = [(100, 37, 16, 11), (17, 130, 32, 12)]


def attention_bounds(length: int, s: int, d: int, programs: int) -> dict[str, int]:
    """The most bytes the attention kernels may load per input, and the exact bytes stored
    (float32): q at most once per row (``L*d*4``), k and v at most once per program instance
    each (``programs*S*d*4``: online softmax reads each key block once per block of queries;
    a two-pass softmax reads k twice), and stores exactly the output (``L*d*4``). The checks
    count as ``programs`` the instances that stored part of the output (instances of a padded
    grid that do nothing do not raise the bound)."""
    return {
        "q": length * d * 4,
        "k": programs * s * d * 4,
        "v": programs * s * d * 4,
        "out": length * d * 4,
    }


def attention_tolerance(args: tuple) -> tuple[float, float]:
    """``(rtol, atol)`` for attention's output against float64: rtol 1e-4, and atol 1e-5 where
    scores are small. Scores of magnitude |s| are rounded in float32 to about |s| * 2**-24
    times a few (a sum of d products that cancel), and an absolute error e in a score is a
    relative error e in its probability: at |s| = 175 (the very negative cases) one float32
    answer (the reference) was measured 1.7e-3 relatively off an output element of 0.005, a
    few 1e-5 absolutely. So atol grows as 1e-5 * max|s| / 10 beyond |s| = 10."""
    q, k, v = args
    if q.numel() == 0 or k.numel() == 0:
        return 1e-4, 1e-5
    top = float((q.double() @ k.double().T).abs().max()) / math.sqrt(q.shape[1])
    scale = float(v.abs().max()) if v.numel() else 1.0
    return 1e-4, 1e-5 * max(1.0, top / 10) * max(1.0, scale / 3)


def _attention_cause(spec: tuple, args: tuple):
    """The likely cause of wrong attention values, from the case: strided rows, and for inf or
    nan whether the query's scores are large (exp overflows) or all very negative (every exp
    underflows to 0, so a running sum started from a running max of 0 stays 0: 0/0)."""

    def cause(finite: bool, where: tuple) -> str:
        pad = spec[4] if len(spec) > 4 else 0
        text = ""
        strided = any(pad) if isinstance(pad, (tuple, list)) else pad
        if strided and finite:
            text += (
                "q, k and v have strided rows here (each its own row stride): address row i "
                "at ptr + i * stride(0) (pass q.stride(0), k.stride(0), v.stride(0)), not i * "
                "d; "
            )
        if not finite:
            q, k, _ = args
            scores = (q[where[0]].double() @ k.double().T) / math.sqrt(q.shape[1])
            top, low = float(scores.max()), float(scores.min())
            if top > 88.0:
                text += (
                    f"numerically unstable: this query's scores reach {top:.4g}, and exp "
                    "overflows float32 above about 88.7 (inf/inf = nan): subtract the running "
                    "max (m_new) before exp; "
                )
            elif top < -87.0:
                text += (
                    f"exp underflowed: every score of this query is at most {top:.4g}, so "
                    "exp(score - c) is 0 in float32 for any c near 0 (below about -104) and "
                    "the running sum stays 0: 0/0 = nan. Start the running max at -inf (not 0) "
                    "so that the first block sets it to the block's max; "
                )
            else:
                text += (
                    f"inf/nan with scores in [{low:.4g}, {top:.4g}]: a block whose keys are all "
                    "masked must not give exp(-inf - -inf) = nan; "
                )
        return text + (
            "softmax over each query's scores scaled by 1/sqrt(d); with online softmax, "
            "rescale the running sum and output by exp(m_old - m_new) when the max grows, "
            "divide by the sum at the end, and mask keys past S with -inf scores"
        )

    return cause


def _judge_attention(spec: tuple, seen: dict) -> None:
    length, s, d = spec[:3]
    label = _label("attention_forward", spec)
    made = seen.get("made", [])
    if made:
        op, shape = made[0]
        fail(
            f"{label}: a tensor of {math.prod(shape)} elements was made by torch",
            yours=f"{op} made a tensor of shape {tuple(shape)}",
            expected=f"no tensor of L*S = {length * s} elements or more: the scores of a block "
            "of queries against a block of keys live in the kernel's registers",
            cause="the full L x S score matrix is materialized (q @ k.T with torch, or a scratch "
            "tensor for the kernel): that is the memory traffic FlashAttention removes. Loop "
            "over blocks of keys in the kernel and keep a running max, sum and output per query "
            "(online softmax)",
        )
    out = _judge_run("attention_forward", spec, seen, launches="one")
    args = make_inputs("attention_forward", spec)
    _require_close(
        "attention_forward", spec, out, expected("attention_forward", args),
        *attention_tolerance(args),
        with_undefined_lanes(_attention_cause(spec, args), seen),
    )  # fmt: skip
    traffic = seen["traffic"]
    _require_stores_exactly_output("attention_forward", spec, traffic, length * d * 4)
    other = _role(traffic, "other")
    require(
        other["loaded"] == 0,
        f"{label}: the kernel read a tensor other than q, k and v",
        yours=f"{other['loaded']} bytes loaded from {other.get('names', [])}",
        expected="loads from q, k and v themselves",
        cause="the kernel reads something computed before it (attention computed with torch, "
        "row by row or block by block, then copied by the kernel?): compute the scores, the "
        "online softmax and the weighted sum of v in the kernel, from q, k and v",
    )
    for role in ("q", "k", "v"):
        row = _role(traffic, role)
        whole = (length if role == "q" else s) * d * 4
        require(
            row["distinct_loaded"] == whole,
            f"{label}: the kernel read only part of {role}",
            yours=f"{row['distinct_loaded']} of {row['nbytes']} bytes of {role} read",
            expected=f"all of {role}",
            cause="every query row attends to every key: the grid must cover all blocks of "
            "queries, and the loop all blocks of keys (range(0, S, BLOCK_S), masked)",
        )
    # the program instances that stored part of the output: a grid padded with instances that
    # do nothing must not raise the bound
    programs = traffic["storing_programs"]
    bounds = attention_bounds(length, s, d, programs)
    for role in ("q", "k", "v"):
        loaded = _role(traffic, role)["loaded"]
        require(
            loaded <= bounds[role],
            f"{label}: {role} loaded {loaded} bytes by {programs} program instance(s)",
            yours=f"{loaded} bytes",
            expected=f"at most {bounds[role]}"
            + (" (each query row once)" if role == "q" else " (once per program instance)"),
            cause="each key and value block is read more than once per block of queries (a "
            "first pass for the max and sum, a second for the output?): online softmax does both "
            "in one pass, rescaling as the max grows",
        )


def check_attention_forward(attention_forward) -> None:
    """Check values against ``F.scaled_dot_product_attention`` (L, S not multiples of a block,
    one query, one key, d = 16 and 32); every lane in bounds; one launch; only the output
    stored (no scratch score matrix), no tensor of ``L*S`` elements made by torch operations,
    q, k and v each read whole and nothing else read (no result computed before the kernel),
    and k and v read at most once per program instance (:func:`attention_bounds`).

    Raises:
        CheckFailed: the first case that differs, with the likely cause.
    """
    fn = student(attention_forward, "attention_forward")
    got = call_student(
        fn.probe,
        _probe_cases_compiled,
        "attention_forward",
        ATTENTION_CASES,
        name="attention_forward",
    )
    for spec, one in zip(ATTENTION_CASES, got["cases"]):
        _judge_attention(spec, one)
    facts = _judge_compiled(
        "attention_forward", _compiled(fn, got["launches"], "attention_forward")
    )
    passed(
        f"attention_forward: {len(ATTENTION_CASES)} shapes, only the output stored, no L x S "
        f"tensor, k and v read once per block of queries; {facts}"
    )


def check_attention_forward_hidden(attention_forward) -> None:
    """Hidden: more shapes, against the reference run alike."""
    fn = student(attention_forward, "attention_forward")
    specs = ATTENTION_HIDDEN + draw_cases("attention_forward", 1, ATTENTION_DRAWS)
    seen = call_student(
        fn.probe, _probe_cases, "attention_forward", specs, name="attention_forward"
    )
    _require_same_as_reference(
        "attention_forward", specs, seen, _judge_attention, attention_tolerance
    )
    passed(f"attention_forward: {len(specs)} hidden cases as torch and the reference")


# --------------------------------------------------------------------------- on a GPU
#: Realistic sizes for the ``_cuda`` checks.
CUDA_SPECS = {
    "bias_gelu": (8192, 8192, 1),
    "softmax_rows": (8192, 4096, 4096, 0.0, 2),
    "matmul": (4096, 4096, 4096, "float16", "nn", 3),
    "attention_forward": (4096, 4096, 64, 4),
}
#: Rows of the output handed back and compared (all of them would be 64-256 MB).
CUDA_ROWS = [0, 1, 2, 511, 1000, 2047, 4095]
#: The bands: the most the kernel's time may be over torch's for the same operation, measured
#: in one probe. Set from the reference's own ratios, timed with this probe at these sizes on an
#: H200 (torch 2.11, triton 3.6, 2026-11-28; ``triton_check_time_ratio_*`` in
#: ``images/recorded_figures.json``, from ``python -m grader measure --only triton``):
#: bias_gelu 0.43 (one pass over x instead of torch's add then gelu), softmax_rows 0.64, matmul
#: 1.09 (float16 against cuBLAS), attention_forward 0.42 (against SDPA's float32 kernel). The
#: simple kernels may take about three times the reference's ratio (and bias_gelu never more
#: than torch's two kernels: a fused kernel that is not faster has not fused); attention
#: about ten times, since block sizes and the order of its two dots change its time most.
MAX_TIME_RATIO = {"bias_gelu": 1.0, "softmax_rows": 2.0, "matmul": 3.0, "attention_forward": 4.0}
#: torch's version of each operation, timed beside the student's.
TORCH_OPS = {
    "bias_gelu": "F.gelu(x + bias, approximate='tanh')",
    "softmax_rows": "torch.softmax(x, dim=1)",
    "matmul": "a @ b",
    "attention_forward": "F.scaled_dot_product_attention(q[None], k[None], v[None])[0]",
}


def _probe_cuda(fn, kind: str) -> dict:
    """Probe: the student's function on CUDA tensors of :data:`CUDA_SPECS` size, warmed up
    (compilation, autotuning), then timed with ``torch.utils.benchmark`` beside torch's
    operation; the output's :data:`CUDA_ROWS` handed back."""
    from torch.utils import benchmark

    args = make_inputs(kind, CUDA_SPECS[kind], device="cuda")
    seen: dict = {}
    with _autotune_without_timing(seen):
        record = attempt(lambda: fn(*args).float()[CUDA_ROWS].cpu())
        if not record["ok"]:
            return {"call": record}
        names = ROLES[kind]
        env = {**dict(zip(names, args)), "fn": fn, "F": F, "torch": torch}
        call = f"fn({', '.join(names)})"
        mine = benchmark.Timer(call, globals=env).blocked_autorange(min_run_time=0.5)
        theirs = benchmark.Timer(TORCH_OPS[kind], globals=env).blocked_autorange(min_run_time=0.5)
    return {
        "call": record,
        "mine_s": mine.median,
        "torch_s": theirs.median,
        "device": torch.cuda.get_device_name(0),
        "autotune": seen,
    }


def _expected_rows(kind: str) -> torch.Tensor:
    """The exercise's result at :data:`CUDA_ROWS`, computed on the GPU in float64."""
    args = make_inputs(kind, CUDA_SPECS[kind], device="cuda")
    if kind == "matmul":
        a, b = args
        return (a[CUDA_ROWS].double() @ b.double()).cpu()
    if kind == "attention_forward":
        q, k, v = (t.double() for t in args)
        return F.scaled_dot_product_attention(q[None], k[None], v[None])[0][CUDA_ROWS].cpu()
    return expected(kind, tuple(t.double() for t in args))[CUDA_ROWS].cpu()


#: Tolerances on the GPU: tl.dot on float32 uses TF32 by default (10-bit mantissa products),
#: so attention is compared loosely; fp16 matmul: the float16 result of a float32 sum.
CUDA_TOL = {
    "bias_gelu": (1e-5, 1e-5),
    "softmax_rows": (1e-4, 1e-6),
    "matmul": (1e-2, 0.25),
    "attention_forward": (2e-2, 2e-2),
}


def _check_cuda(fn_obj, kind: str, what: str) -> dict | None:
    if not cuda_or_not_checked(what):
        return None
    fn = student(fn_obj, kind)
    seen = call_student(fn.probe, _probe_cuda, kind, name=f"{kind} on CUDA tensors")
    got = call_student(lambda: outcome(seen["call"]), name=f"{kind} on CUDA tensors")
    want = _expected_rows(kind).double()
    rtol, atol = CUDA_TOL[kind]
    bad = ~torch.isclose(got.double(), want, rtol=rtol, atol=atol)
    require(
        not bad.any(),
        f"{kind} on CUDA tensors {CUDA_SPECS[kind][:3]}: wrong values",
        yours=f"{int(bad.sum())} elements off, max difference "
        f"{(got.double() - want).abs().max().item():.3g}",
        expected=f"within rtol={rtol:g}, atol={atol:g}",
        cause="the CPU checks pass? Then look for what the interpreter does not show: a race "
        "between program instances, or num_warps/num_stages in a config the interpreter "
        "ignored",
    )
    ratio = seen["mine_s"] / seen["torch_s"]
    require(
        ratio <= MAX_TIME_RATIO[kind],
        f"{kind} on {seen['device']}: {seen['mine_s'] * 1e3:.3f} ms, torch "
        f"({TORCH_OPS[kind]}) {seen['torch_s'] * 1e3:.3f} ms",
        yours=f"{ratio:.2f} x torch's time",
        expected=f"at most {MAX_TIME_RATIO[kind]:g} x",
        cause="block sizes too small for the GPU (each program instance does too little), "
        "or extra passes over memory",
    )
    return {**seen, "ratio": ratio}


def check_bias_gelu_cuda(bias_gelu) -> None:
    """CUDA: values on an (8192, 8192) float32 x, and the kernel's time against torch's
    unfused ``F.gelu(x + bias)`` (two kernels) in one run: at most :data:`MAX_TIME_RATIO`."""
    seen = _check_cuda(bias_gelu, "bias_gelu", "bias_gelu's time against torch's on a GPU")
    if seen is not None:
        passed(
            f"bias_gelu: {seen['ratio']:.2f} x the time of torch's add + gelu ({seen['device']})"
        )


def check_softmax_rows_cuda(softmax_rows) -> None:
    """CUDA: values on (8192, 4096) float32, time against ``torch.softmax``; prints the
    achieved bandwidth (read once, written once)."""
    seen = _check_cuda(softmax_rows, "softmax_rows", "softmax_rows's bandwidth on a GPU")
    if seen is not None:
        m, n = CUDA_SPECS["softmax_rows"][:2]
        gbs = 2 * m * n * 4 / seen["mine_s"] / 1e9
        passed(f"softmax_rows: {gbs:.0f} GB/s, {seen['ratio']:.2f} x torch.softmax's time "
               f"({seen['device']})")  # fmt: skip


def check_matmul_cuda(matmul) -> None:
    """CUDA: values on 4096^3 float16, TFLOP/s against cuBLAS (``a @ b``), and the autotuner
    had several configs to choose from on the GPU."""
    seen = _check_cuda(matmul, "matmul", "matmul's TFLOP/s against cuBLAS on a GPU")
    if seen is None:
        return
    configs = seen["autotune"].get("configs", 0)
    require(
        configs >= 2,
        "matmul on CUDA tensors: the autotuner had fewer than two configs",
        yours=f"{configs} config(s)",
        expected="at least 2 on a GPU",
        cause="give @triton.autotune several configs where kernels are compiled for the GPU "
        "(one is for the interpreter only)",
    )
    m, k, n = CUDA_SPECS["matmul"][:3]
    tflops = 2 * m * n * k / seen["mine_s"] / 1e12
    passed(
        f"matmul: {tflops:.0f} TFLOP/s, {seen['ratio']:.2f} x cuBLAS's time, best of "
        f"{configs} configs ({seen['device']})"
    )


def check_attention_forward_cuda(attention_forward) -> None:
    """CUDA: values at L = S = 4096, d = 64 (float32; TF32 in tl.dot), time against
    ``F.scaled_dot_product_attention``."""
    seen = _check_cuda(
        attention_forward, "attention_forward", "attention_forward against SDPA on a GPU"
    )
    if seen is not None:
        passed(
            f"attention_forward: {seen['ratio']:.2f} x the time of "
            f"F.scaled_dot_product_attention ({seen['device']})"
        )


# --------------------------------------------------------------------------- demos
def unfused_bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """bias + GELU (tanh form) written out op by op, as a model's code often is: each
    operation one kernel, each reading and writing a full tensor."""
    h = x + bias
    return 0.5 * h * (1.0 + torch.tanh(0.7978845608028654 * (h + 0.044715 * h**3)))


def warm_caches() -> None:
    """Compile what the notebook's section 4 compiles (Inductor's C++ for
    :func:`unfused_bias_gelu` on the CPU), so Inductor's on-disk cache holds it: the first
    ``torch.compile`` in a process with an empty cache builds Inductor's C++ support code (about
    15 s on a 2-core CPU). The grading command runs this once per class and copies the cache into
    each kernel's own folder (:mod:`grader.grading.grading`)."""
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(unfused_bias_gelu)
    compiled(torch.randn(256, 300), torch.randn(300))
    _warm_notebook_kernels()


def _warm_notebook_kernels() -> None:
    """Run the notebook's code cells that are neither graded nor answers (its demos and
    helpers, read from the instructor's source in ``solutions/``, never from ``notebooks/``
    where a student may be working; an answer cell would define the reference) in this process, so that Triton's cache (``TRITON_CACHE_DIR``) holds
    what the notebook's section 5 compiles for sm_90 and sm_80: the notebook's own kernels (a
    128 x 128 x 64 tile in nine variants, ...), about half a minute of compiling with an empty
    cache on 2 cores, which each graded submission then reads instead of compiling again. The
    compiled kernels are keyed by their source and signature, the same in every submission's
    copy of these cells. A cell that fails (one that calls an exercise's function) is skipped."""
    import json
    import linecache
    import os

    os.environ.setdefault("MPLBACKEND", "Agg")
    from grader.runtime import course

    cells = json.loads(course.source_path(ASSIGNMENT).read_text())["cells"]
    namespace: dict = {"__name__": "__main__"}
    for cell in cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code" or meta.get("grade") or meta.get("solution"):
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        filename = f"<12_triton:{cell.get('id')}>"
        # in the line cache, as IPython keeps a cell: @triton.jit reads its function's source
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the course's cells
        except Exception:  # noqa: BLE001, S112 - a stub or a GPU-only cell: the others still warm
            continue
