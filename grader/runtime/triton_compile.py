"""Triton kernels compiled for real GPUs on a machine without one: registers, spills, shared
memory, occupancy, and the compiler's own errors.

For the checks of the Triton notebook (12): a student's ``@triton.jit`` kernels run on CPU
tensors under Triton's interpreter (:mod:`~grader.runtime.triton_cpu`), which gives their values
and bytes but cannot tell what the compiler makes of them: registers per thread, spills, shared
memory, how many blocks fit on an SM, or even whether the compiler accepts the kernel at all (a
loop-carried variable that starts as a scalar and becomes a block runs in NumPy, and the
compiler rejects it). Triton's wheel carries everything needed to answer without a GPU: its
compiler, ``ptxas`` and ``cuobjdump`` (``triton/backends/nvidia/bin/``). So:

1. :func:`record_launches` notes, while the kernels run (under the interpreter or not), each
   distinct launch as plain, json-able data: the module text that defines the kernel, its
   signature as Triton's launcher computes it (``triton.runtime.jit``'s
   ``create_function_from_signature`` and ``native_specialize_impl``: ``*fp32``, ``i32``/``i64``
   by value, ``constexpr`` for the ``tl.constexpr`` parameters and for the arguments Triton
   specializes, an int equal to 1 and None), the constexpr values, the arguments divisible by
   16 (what lets Triton vectorize loads), and ``num_warps``/``num_stages`` as given directly or
   by the ``@triton.autotune`` config that ran.
2. :func:`compile_launches` compiles them all for sm_90 (H100) and sm_80 (A100) in one fresh
   Python process (``python -m grader.runtime.triton_compile``, json on stdin and stdout):
   fresh, because after Triton's interpreter has run in a process, compiling a kernel that calls
   ``tl.max`` or ``tl.sum`` fails ("'ir.value' object has no attribute 'dtype'"), and because
   ``TRITON_INTERPRET`` must be unset for ``@triton.jit`` to build a compilable ``JITFunction``.
   Per kernel and architecture it gives the compiler's message when it rejects the kernel,
   else registers per thread and the stack frame (where ptxas puts spilled registers) read from
   the cubin with ``cuobjdump -res-usage``, Triton's shared memory per block, the
   :func:`occupancy` that follows, and short excerpts of the TTGIR and PTX (:func:`excerpt`).
3. :func:`occupancy`: resident blocks and warps per SM and what limits them, from the per-SM
   limits of compute capabilities 9.0 and 8.0 (:data:`ARCH_LIMITS`).

What the figures are not: a measurement on a GPU. Registers, spills and shared memory are what
the compiler allocates for the arguments the kernel was launched with (Triton compiles one
variant per signature and constexpr values); occupancy is the upper bound those allow, not the
warps a profiler would see resident; and nothing here says how fast the kernel runs.

May import: the standard library and triton (imported inside functions, so that importing this
module costs nothing), never :mod:`grader.checks`, :mod:`grader.grading` or :mod:`grader.tools`.
The subprocess imports triton only, not torch.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import inspect
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import types
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

#: The architectures :func:`compile_launches` compiles for by default: H100 (sm_90), A100 (sm_80).
DEFAULT_ARCHS = (90, 80)
#: Seconds :func:`compile_launches` waits for its compile process by default. Measured on a
#: 2-core CPU machine: the process starts in about 1 s and compiles a kernel for one
#: architecture in 0.1 to 1.5 s (a float16 matmul tile loop for sm_90 is the slow one).
DEFAULT_TIMEOUT_S = 180.0
#: At most this many lines in a TTGIR or PTX excerpt.
EXCERPT_LINES = 20
#: How :func:`compile_launches` measures ``spills``.
SPILLS_MEASURE = (
    "stack frame bytes per thread (cuobjdump -res-usage STACK): where ptxas puts spilled "
    "registers (its 'N bytes stack frame, N bytes spill stores'); 0 means no spills"
)

#: Per-SM limits of the compute capabilities the course compiles for. Sources: NVIDIA, *CUDA C++
#: Programming Guide*, "Compute Capabilities" (technical specifications per compute
#: capability: 64 K 32-bit registers per SM, at most 255 per thread, 64 resident warps and 32
#: resident blocks per SM, 1024 threads per block; shared memory per SM up to 228 KB for 9.0
#: and 164 KB for 8.0, per block up to 227 KB and 163 KB, "the 1 KB of shared memory not made
#: available to a thread block is reserved for system use"); the register allocation unit (256
#: registers per warp), warp allocation granularity (4) and shared memory allocation unit (128
#: bytes) are those of NVIDIA's CUDA Occupancy Calculator for 8.0, taken as the same for 9.0
#: (the calculator's tables consulted stop at 8.6); NVIDIA H100 and A100 Tensor Core GPU
#: Architecture whitepapers (256 KB combined L1/shared memory per SM on H100, up to 228 KB of it
#: shared; 192 KB on A100, up to 164 KB). Cross-checked against the device attributes a
#: compute capability 9.0 GPU reports (cudaDevAttrMaxSharedMemoryPerMultiprocessor 233472 =
#: 228 KB, cudaDevAttrMaxSharedMemoryPerBlockOptin 232448 = 227 KB, the "Hardware limit" of
#: Triton's out-of-resource error; 32 blocks, 2048 threads per SM).
ARCH_LIMITS: dict[int, dict[str, Any]] = {
    90: {
        "gpu": "H100 (compute capability 9.0)",
        "registers_per_sm": 65536,
        "max_registers_per_thread": 255,
        "register_allocation_unit": 256,
        "warp_allocation_granularity": 4,
        "max_warps_per_sm": 64,
        "max_blocks_per_sm": 32,
        "max_threads_per_block": 1024,
        "shared_bytes_per_sm": 228 * 1024,
        "max_shared_bytes_per_block": 227 * 1024,
        "reserved_shared_bytes_per_block": 1024,
        "shared_allocation_unit": 128,
    },
    80: {
        "gpu": "A100 (compute capability 8.0)",
        "registers_per_sm": 65536,
        "max_registers_per_thread": 255,
        "register_allocation_unit": 256,
        "warp_allocation_granularity": 4,
        "max_warps_per_sm": 64,
        "max_blocks_per_sm": 32,
        "max_threads_per_block": 1024,
        "shared_bytes_per_sm": 164 * 1024,
        "max_shared_bytes_per_block": 163 * 1024,
        "reserved_shared_bytes_per_block": 1024,
        "shared_allocation_unit": 128,
    },
}


# ---------------------------------------------------------------------------------------------
# Occupancy


def occupancy(registers: int, shared_bytes: int, num_warps: int, arch: int) -> dict[str, Any]:
    """How many blocks (Triton's program instances) of a kernel fit on one SM at once.

    The CUDA Occupancy Calculator's rules with the limits of :data:`ARCH_LIMITS`: each warp's
    registers are rounded up to the allocation unit, warps per SM as limited by registers are
    rounded down to the warp allocation granularity, and each block's shared memory gets the 1
    KB the system reserves and is rounded up to the allocation unit.

    Args:
        registers: registers per thread (ptxas's figure; 0 when unknown: no register limit).
        shared_bytes: shared memory per block in bytes, as Triton allocates it (its
            ``metadata.shared``), without the 1 KB the system reserves (added here).
        num_warps: warps per block (Triton's ``num_warps``; 32 threads each).
        arch: compute capability as an int, 90 or 80 (a key of :data:`ARCH_LIMITS`).

    Returns:
        ``{"arch": "sm_90", "blocks_per_sm", "warps_per_sm", "max_warps_per_sm", "occupancy"``
        (resident warps / maximum warps, 0 to 1), ``"limited_by"`` (the limits that give
        ``blocks_per_sm``, among "warps", "blocks", "registers", "shared memory"),
        ``"blocks_by"`` (blocks per SM each limit allows alone), ``"registers_per_block"``,
        ``"shared_bytes_per_block"`` (with the reserved 1 KB, rounded), ``"launch_error"``
        (None, or why a GPU of that architecture refuses the launch, in Triton's words)``}``.

    Raises:
        ValueError: ``arch`` is not in :data:`ARCH_LIMITS`, or a figure is negative, or
            ``num_warps`` is below 1.
    """
    if arch not in ARCH_LIMITS:
        raise ValueError(f"no per-SM limits for sm_{arch}; known: {sorted(ARCH_LIMITS)}")
    if registers < 0 or shared_bytes < 0 or num_warps < 1:
        raise ValueError(
            f"registers ({registers}) and shared_bytes ({shared_bytes}) must be >= 0 and "
            f"num_warps ({num_warps}) >= 1"
        )
    lim = ARCH_LIMITS[arch]
    warp = 32
    unit = lim["register_allocation_unit"]
    regs_per_warp = math.ceil(registers * warp / unit) * unit
    gran = lim["warp_allocation_granularity"]
    by_warps = lim["max_warps_per_sm"] // num_warps
    if registers > lim["max_registers_per_thread"]:
        by_regs = 0
    elif registers == 0:
        by_regs = lim["max_blocks_per_sm"]
    else:
        warps_by_regs = (lim["registers_per_sm"] // regs_per_warp) // gran * gran
        by_regs = warps_by_regs // num_warps
    smem_unit = lim["shared_allocation_unit"]
    smem_block = shared_bytes + lim["reserved_shared_bytes_per_block"]
    smem_block = math.ceil(smem_block / smem_unit) * smem_unit
    if shared_bytes > lim["max_shared_bytes_per_block"]:
        by_smem = 0
    else:
        by_smem = lim["shared_bytes_per_sm"] // smem_block
    blocks_by = {
        "warps": by_warps,
        "blocks": lim["max_blocks_per_sm"],
        "registers": by_regs,
        "shared memory": by_smem,
    }
    blocks = min(blocks_by.values())
    launch_error = None
    threads = num_warps * warp
    max_threads = min(
        lim["max_threads_per_block"],
        (lim["registers_per_sm"] // regs_per_warp) * warp if regs_per_warp else 1 << 30,
    )
    # Triton's own words at launch (triton/runtime/errors.py, OutOfResources; checked in
    # CompiledKernel._init_handles against the device's limits).
    if shared_bytes > lim["max_shared_bytes_per_block"]:
        launch_error = (
            f"out of resource: shared memory, Required: {shared_bytes}, Hardware limit: "
            f"{lim['max_shared_bytes_per_block']}. Reducing block sizes or `num_stages` may help."
        )
    elif threads > max_threads:
        launch_error = (
            f"out of resource: threads, Required: {threads}, Hardware limit: {max_threads}. "
            f"Reducing block sizes or `num_stages` may help."
        )
    return {
        "arch": f"sm_{arch}",
        "blocks_per_sm": blocks,
        "warps_per_sm": blocks * num_warps,
        "max_warps_per_sm": lim["max_warps_per_sm"],
        "occupancy": blocks * num_warps / lim["max_warps_per_sm"],
        "limited_by": [k for k, v in blocks_by.items() if v == blocks],
        "blocks_by": blocks_by,
        "registers_per_block": regs_per_warp * num_warps,
        "shared_bytes_per_block": smem_block,
        "launch_error": launch_error,
    }


# ---------------------------------------------------------------------------------------------
# Excerpts

_LOC = re.compile(r"\s*loc\((?:[^()]|\([^()]*\))*\)")
#: TTGIR operations worth showing a student: memory, layouts, Tensor Core, pipelining.
_TTGIR_OPS = tuple(
    """
    tt.load tt.store tt.dot tt.reduce tt.descriptor_load tt.descriptor_store tt.atomic_rmw
    scf.for ttg.convert_layout ttg.local_alloc ttg.local_load ttg.local_store
    ttg.async_copy_global_to_local ttg.async_commit_group ttg.async_wait ttg.warp_specialize
    ttng.warp_group_dot ttng.warp_group_dot_wait ttng.async_tma_copy_global_to_local
    ttng.tc_gen5_mma ttng.init_barrier ttng.wait_barrier
    """.split()
)
#: PTX opcode prefixes worth showing: global and shared memory, async copies, Tensor Core
#: instructions, barriers and shuffles (reductions), fast math.
_PTX_OPS = tuple(
    """
    ld.global st.global ld.shared st.shared cp.async ldmatrix stmatrix mma.sync wgmma tcgen05
    mbarrier bar.sync shfl.sync red.global atom.global ex2.approx tanh.approx rcp.approx
    """.split()
)
_TTGIR_OP = re.compile(r"^\s*(?:%[\w#:,\s%]+=\s*)?\"?([a-z_]+\.[a-z_.]+)")
_PTX_OP = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.:]*)")


_DOT = re.compile(
    r"tt\.dot\s[^:]*?(?:inputPrecision\s*=\s*(\w+))?\s*:\s*tensor<(?:\d+x)+(\w+)>\s*\*\s*"
    r"tensor<(?:\d+x)+(\w+)>\s*->\s*tensor<(?:\d+x)+(\w+)>"
)


def dots(ttir: str) -> list[dict[str, str]]:
    """Every ``tt.dot`` of a kernel's TTIR (``CompiledKernel.asm["ttir"]``): its operand and
    result element types and its input precision, as ``{"a": "f32", "b": "f32", "out":
    "f32", "precision": "tf32"}``. The TTIR omits the precision when it is ``ieee`` (seen with
    triton 3.8: ``tt.dot %a, %b, %acc : tensor<32x32xf32> * ...`` for ``"ieee"``, ``...,
    inputPrecision = tf32 : ...`` for the default and ``tf32x3`` for ``"tf32x3"``). On
    float32 operands ``tf32`` means TF32 products on a GPU (about 1e-3 relative)."""
    found = []
    for line in ttir.splitlines():
        if "tt.dot " not in line:
            continue
        match = _DOT.search(line)
        if match:
            precision, a, b, out = match.groups()
            found.append({"a": a, "b": b, "out": out, "precision": precision or "ieee"})
    return found


def excerpt(text: str, kind: str, max_lines: int = EXCERPT_LINES) -> str:
    """The instructive lines of a kernel's TTGIR or PTX, at most ``max_lines`` of them.

    TTGIR: the layouts (``#blocked``, ``#mma = #ttg.nvidia_mma``, ``#shared``), the module's
    warps, then the first line of each kind of memory, layout and Tensor Core operation
    (``tt.load``, ``ttg.local_alloc``, ``ttg.async_copy_global_to_local``, ``tt.dot`` or
    ``ttng.warp_group_dot``...), without ``loc(...)`` annotations. PTX: the ``.reg`` and
    ``.shared`` declarations, then the first instruction of each opcode among global and shared
    loads and stores (``ld.global.v4.b32`` says 16-byte vector loads), ``cp.async``,
    ``ldmatrix``, ``mma.sync``/``wgmma``, barriers and shuffles. A line that stands for several
    ends with ``// xN``. Lines are cut at 160 characters.

    Args:
        text: the TTGIR or PTX text (``CompiledKernel.asm["ttgir"]`` or ``["ptx"]``).
        kind: ``"ttgir"`` or ``"ptx"``.
        max_lines: the cap on lines returned.

    Returns:
        The excerpt, lines joined with newlines ("" when nothing matched).

    Raises:
        ValueError: ``kind`` is neither ``"ttgir"`` nor ``"ptx"``.
    """
    if kind not in {"ttgir", "ptx"}:
        raise ValueError(f'kind must be "ttgir" or "ptx", not {kind!r}')
    head: list[str] = []
    firsts: dict[str, str] = {}
    counts: dict[str, int] = {}
    for raw in text.splitlines():
        line = _LOC.sub("", raw).rstrip()
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        if kind == "ttgir":
            if stripped.startswith("#") and not stripped.startswith("#loc"):
                head.append(stripped)
                continue
            if stripped.startswith("module attributes"):
                head.append(stripped.removesuffix("{").rstrip())
                continue
            m = _TTGIR_OP.match(line)
            op = m.group(1) if m else None
            if op not in _TTGIR_OPS:
                continue
        else:
            if stripped.startswith((".reg", ".extern .shared", ".shared", ".maxnreg", ".reqntid")):
                head.append(stripped)
                continue
            m = _PTX_OP.match(line)
            op = m.group(1) if m else None
            if op is None or not op.startswith(_PTX_OPS):
                continue
        counts[op] = counts.get(op, 0) + 1
        firsts.setdefault(op, stripped)
    body = [f"{firsts[op]}  // x{counts[op]}" if counts[op] > 1 else firsts[op] for op in firsts]
    lines = [_cut(x) for x in head + body]
    if len(lines) > max_lines:
        lines = lines[: max_lines - 1] + [f"// ... {len(lines) - max_lines + 1} more"]
    return "\n".join(lines)


def _cut(line: str, width: int = 160) -> str:
    return line if len(line) <= width else line[: width - 3] + "..."


# ---------------------------------------------------------------------------------------------
# Re-creating a kernel's module


class _ModuleText:
    """The text of a module that re-creates kernels: imports, constants, ``@triton.jit`` defs."""

    def __init__(self) -> None:
        self.imports = ["import triton", "import triton.language as tl"]
        self.constants: list[str] = []
        self.functions: list[str] = []
        # name -> what it is bound to (for imports: the import line)
        self.bound: dict[str, str] = {n: line for n, line in zip(("triton", "tl"), self.imports)}
        self.done: dict[Any, str] = {}  # Python function -> the name it is defined under
        self.problems: list[str] = []

    def text(self) -> str:
        parts = ["\n".join(self.imports)]
        if self.constants:
            parts.append("\n".join(self.constants))
        parts += self.functions
        return "\n\n\n".join(parts) + "\n"

    def bind(self, name: str, what: str, line: str, where: list[str]) -> None:
        """Add ``line`` (which binds ``name`` to ``what``) unless ``name`` is bound already."""
        if name in self.bound:
            if self.bound[name] != what:
                self.problems.append(
                    f"cannot re-create global {name}: the kernels' functions read two "
                    f"different values under that name ({self.bound[name]}, {what})"
                )
            return
        self.bound[name] = what
        where.append(line)

    def add_function(self, jitted: Any, name: str | None = None) -> None:
        """Add a ``@triton.jit`` function and, recursively, what its body reads."""
        fn = jitted.fn
        if fn in self.done:
            if name is not None and name != self.done[fn]:
                self.bind(
                    name, f"function {self.done[fn]}", f"{name} = {self.done[fn]}", self.functions
                )
            return
        own = fn.__name__
        self.done[fn] = own
        src = _def_source(jitted)
        if src is None:
            self.problems.append(
                f"cannot re-create {own}: Python has no source text for it (inspect.getsource "
                f"failed); define it in a file or a notebook cell"
            )
            return
        if own in self.bound:
            self.problems.append(f"cannot re-create {own}: two different functions have that name")
            return
        self.bound[own] = f"function {own}"
        self.functions.append(f"{_decorator(jitted)}\n{src.rstrip()}")
        if name is not None and name != own:
            self.bind(name, f"function {own}", f"{name} = {own}", self.functions)
        for global_name, value in _globals_read(fn, src):
            self.add_global(global_name, value)

    def add_global(self, name: str, value: Any) -> None:
        """Add the definition of a global a kernel's body reads, or record why it cannot."""
        line = _import_line(name, value)
        if line is not None:
            self.bind(name, line, line, self.imports)
            return
        jitted = _as_jit_function(value)
        if jitted is not None:
            self.add_function(jitted, name)
            return
        literal = _literal(value)
        if literal is not None:
            self.bind(name, f"value {literal}", f"{name} = {literal}", self.constants)
            return
        self.problems.append(
            f"cannot re-create global {name} of type {type(value).__qualname__}: a kernel may "
            f"read modules, @triton.jit functions, triton's own functions and constants "
            f"(int, float, bool, str, None, tl.constexpr(...), tl dtypes)"
        )


def kernel_source(kernel: Any) -> tuple[str, list[str]]:
    """The text of a Python module that defines ``kernel`` again, in another process.

    The module has ``import triton``, ``import triton.language as tl``, and what the kernel's
    body reads from its globals (and closure), recursively through the ``@triton.jit`` functions
    it calls: modules as imports by their module name (``tl``, ``math``, ``libdevice`` from
    ``triton.language.extra``...), triton's own functions as ``from ... import``, other
    ``@triton.jit`` functions by their source, and constants (int, float, bool, str, None,
    ``tl.constexpr(...)``, tl dtypes) as assignments. Every function is decorated with
    ``@triton.jit`` alone: ``@triton.autotune`` and ``@triton.heuristics`` are left out, since a
    recorded launch has their values among its constexprs and options.

    Args:
        kernel: a ``@triton.jit`` kernel (``JITFunction`` or ``InterpretedFunction``), possibly
            under ``@triton.autotune``/``@triton.heuristics``.

    Returns:
        ``(text, problems)``: the module's text, and one sentence per global it could not
        re-create (e.g. "cannot re-create global W of type Tensor ..."); empty when the text is
        complete.

    Raises:
        TypeError: ``kernel`` is not a Triton kernel.
    """
    jitted = _as_jit_function(_unwrap(kernel))
    if jitted is None:
        raise TypeError(f"expected a @triton.jit kernel, got {type(kernel).__name__}")
    module = _ModuleText()
    module.add_function(jitted)
    return module.text(), module.problems


def _unwrap(kernel: Any) -> Any:
    """The ``JITFunction``/``InterpretedFunction`` under autotune/heuristics wrappers."""
    for _ in range(10):  # wrappers of wrappers, within reason
        if type(kernel).__name__ not in {"Autotuner", "Heuristics"} or not hasattr(kernel, "fn"):
            break
        kernel = kernel.fn
    return kernel


def _as_jit_function(value: Any) -> Any:
    """``value`` if it is a ``@triton.jit`` function (compiled or interpreted), else None."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if isinstance(value, (JITFunction, InterpretedFunction)):
        return value
    return None


def _def_source(jitted: Any) -> str | None:
    """The function's ``def`` and body without decorators (``JITFunction.src``'s form)."""
    src = getattr(jitted, "src", None)
    if isinstance(src, str):
        return src
    try:
        raw = inspect.getsource(jitted.fn)
    except (OSError, TypeError):
        return None
    raw = textwrap.dedent(raw)
    m = re.search(r"^def\s+\w+\s*\(", raw, re.MULTILINE)
    return raw[m.start() :] if m else None


def _decorator(jitted: Any) -> str:
    """``@triton.jit`` with the options that change the generated code (noinline, debug)."""
    opts = getattr(jitted, "kwargs", None) or {
        "noinline": getattr(jitted, "noinline", None),
        "debug": getattr(jitted, "debug", None),
    }
    extra = [f"{k}=True" for k in ("noinline", "debug") if opts.get(k)]
    return f"@triton.jit({', '.join(extra)})" if extra else "@triton.jit"


def _globals_read(fn: Any, src: str) -> list[tuple[str, Any]]:
    """``(name, value)`` of each global or closure variable the function's text reads, in the
    order of first reading; builtins and names bound nowhere are left out."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return []
    code = fn.__code__
    local = set(code.co_varnames) | set(code.co_cellvars)
    closure = {}
    for var, cell in zip(code.co_freevars, fn.__closure__ or ()):
        with contextlib.suppress(ValueError):  # an empty cell
            closure[var] = cell.cell_contents
    first: dict[str, tuple[int, int]] = {}  # name -> where the text first reads it
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in local:
            where = (node.lineno, node.col_offset)
            first[node.id] = min(where, first.get(node.id, where))
    names = sorted(first, key=first.__getitem__)
    out = []
    missing = object()
    for name in names:
        if name in closure:
            out.append((name, closure[name]))
            continue
        value = fn.__globals__.get(name, missing)
        if value is missing:
            continue  # a builtin (range, min...) or a name the compiler will report
        if name in vars(builtins) and value is vars(builtins)[name]:
            continue
        out.append((name, value))
    return out


def _import_line(name: str, value: Any) -> str | None:
    """An import statement that binds ``name`` to ``value`` (a module, or a function or object
    of triton's own), or None."""
    if isinstance(value, types.ModuleType):
        mod = value.__name__
        if mod == name:
            return f"import {mod}"
        return f"import {mod} as {name}"
    fn = getattr(value, "fn", value)  # a triton.language @jit helper: its Python function
    mod = getattr(fn, "__module__", None) or ""
    qual = getattr(fn, "__qualname__", "") or ""
    if not mod.startswith("triton") or not qual.isidentifier():
        return None
    try:
        found = getattr(importlib.import_module(mod), qual, None)
    except ImportError:
        return None
    if found is not value:
        return None
    return f"from {mod} import {qual}" if qual == name else f"from {mod} import {qual} as {name}"


def _literal(value: Any) -> str | None:
    """Python text that evaluates to ``value`` in the generated module, or None."""
    import triton.language as tl

    if value is None or type(value) in (bool, int, str):
        return repr(value)
    if type(value) is float:
        return repr(value) if math.isfinite(value) else f'float("{value}")'
    if isinstance(value, tl.constexpr):
        inner = _literal(value.value)
        return None if inner is None else f"tl.constexpr({inner})"
    if type(value) is tl.dtype:
        for attr, obj in vars(tl).items():
            if obj is value or (
                isinstance(obj, tl.dtype)
                and type(obj) is tl.dtype
                and obj == value
                and not attr.startswith("_")
            ):
                return f"tl.{attr}"
        return f"tl.dtype({value.name!r})"
    if isinstance(value, tuple) and type(value) is tuple:
        items = [_literal(v) for v in value]
        if any(i is None for i in items):
            return None
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    return None


# ---------------------------------------------------------------------------------------------
# Recording launches


class _Recorder:
    """One :func:`record_launches` block: its list and what it has seen."""

    def __init__(self) -> None:
        self.launches: list[dict[str, Any]] = []
        self.seen: set[tuple[Any, str]] = set()
        self.sources: dict[Any, tuple[str, list[str]]] = {}


_recorders: list[_Recorder] = []
_state = threading.local()
_lock = threading.Lock()
#: Kernel -> Triton's binder of its arguments (``create_function_from_signature``).
_binders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def record_launches() -> Iterator[list[dict[str, Any]]]:
    """Record every ``@triton.jit`` kernel launched inside the block, once per variant.

    ``with record_launches() as launches: student_softmax(x)`` runs the student's code as it
    is (under the interpreter or not, inside :func:`~grader.runtime.triton_cpu.count_traffic`
    or not, directly ``kernel[grid](...)`` or through ``@triton.autotune``/``@triton.heuristics``)
    and appends to ``launches`` one dict per variant Triton would compile separately (distinct
    kernel, signature, constexprs, alignment, num_warps, num_stages, maxnreg), in the order of
    their first launch::

        {"kernel": "softmax_kernel", "source": "import triton\\n...",
         "signature": {"x_ptr": "*fp32", "N": "i32", "BLOCK": "constexpr", ...},
         "constexprs": {"BLOCK": 1024}, "divisible_by_16": ["x_ptr", ...],
         "num_warps": None, "num_stages": None, "maxnreg": None, "problems": []}

    The launch itself is not changed; a launch is recorded before it runs, so one that fails is
    recorded too. ``source`` is :func:`kernel_source`'s text and ``problems`` its reasons, plus
    constexpr values that are not plain data; ``num_warps``/``num_stages`` are None when the
    launch left them to Triton (4 and 3 on NVIDIA GPUs). A tuple argument's members are named
    ``"name[i]"`` in ``constexprs`` and ``divisible_by_16``. Blocks may nest: each gets every
    launch. Do not record from two threads at once.

    Yields:
        The list, filled as kernels launch.
    """
    recorder = _Recorder()
    with _lock:
        _install()
        _recorders.append(recorder)
    try:
        yield recorder.launches
    finally:
        with _lock:
            _recorders.remove(recorder)
            if not _recorders:
                _uninstall()


_installed: dict[type, Any] = {}


def _install() -> None:
    """Wrap ``JITFunction.run`` and ``InterpretedFunction.run`` (once while any block is open)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    for cls in (JITFunction, InterpretedFunction):
        if cls in _installed:
            continue
        wrapper = _recording_run(cls.run)
        _installed[cls] = wrapper
        cls.run = wrapper


def _uninstall() -> None:
    """Put back what :func:`_install` wrapped, where nothing has wrapped it since (else the
    wrapper stays, passing launches through, and whoever wrapped it restores it later)."""
    for cls, wrapper in list(_installed.items()):
        if cls.__dict__.get("run") is wrapper:
            cls.run = wrapper._original
        del _installed[cls]


def _recording_run(original: Any) -> Any:
    """A ``run`` that records the launch, then calls ``original``. Inside a launch already being
    recorded (``count_traffic`` runs a ``JITFunction`` through an interpreted copy) it only
    passes through."""

    def run(self: Any, *args: Any, grid: Any, warmup: Any, **kwargs: Any) -> Any:
        if not _recorders or getattr(_state, "inside", False):
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        _state.inside = True
        try:
            _note(self, args, kwargs)
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            _state.inside = False

    run._original = original  # type: ignore[attr-defined]
    return run


def _note(kernel: Any, args: tuple, kwargs: dict) -> None:
    """Append the launch to every open recorder that has not seen its variant."""
    fn = kernel.fn
    try:
        spec = _launch_spec(kernel, args, kwargs)
    except Exception as e:  # noqa: BLE001 - a recording must never break the student's launch
        spec = {
            "signature": {},
            "constexprs": {},
            "divisible_by_16": [],
            "num_warps": None,
            "num_stages": None,
            "maxnreg": None,
            "problems": [f"could not read the launch's signature: {type(e).__name__}: {e}"],
        }
    spec_problems = spec.pop("problems")
    key = (fn, json.dumps(spec, sort_keys=True, default=repr))
    for rec in list(_recorders):
        if key in rec.seen:
            continue
        rec.seen.add(key)
        if fn not in rec.sources:
            try:
                rec.sources[fn] = kernel_source(kernel)
            except Exception as e:  # noqa: BLE001
                rec.sources[fn] = ("", [f"could not re-create {fn.__name__}: {e}"])
        text, problems = rec.sources[fn]
        rec.launches.append(
            {"kernel": fn.__name__, "source": text, **spec, "problems": problems + spec_problems}
        )


def _binder(kernel: Any) -> Any:
    """Triton's binder of the kernel's arguments: ``(bound, specialization, options)``."""
    from triton.backends import BaseBackend
    from triton.runtime.jit import KernelParam, create_function_from_signature

    binder = _binders.get(kernel)
    if binder is not None:
        return binder
    signature = inspect.signature(kernel.fn)
    params = getattr(kernel, "params", None)
    if params is None:  # an InterpretedFunction: its jit options are in .kwargs
        opts = getattr(kernel, "kwargs", {}) or {}
        dns = opts.get("do_not_specialize") or ()
        dnsa = opts.get("do_not_specialize_on_alignment") or ()
        params = [
            KernelParam(i, p, i in dns or p.name in dns, i in dnsa or p.name in dnsa)
            for i, p in enumerate(signature.parameters.values())
        ]
    # BaseBackend's int and tensor specializations are those of the CUDA backend (which does not
    # override them): "D" when divisible by 16 (tensors: their data_ptr).
    binder = create_function_from_signature(signature, params, BaseBackend)
    _binders[kernel] = binder
    return binder


def _launch_spec(kernel: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The launch's signature, constexprs, alignment and options, as plain data (Triton's
    ``JITFunction.run`` and ``_pack_args`` on the same arguments)."""
    from triton._utils import find_paths_if, get_iterable_path

    bound, specialization, options = _binder(kernel)(*args, **kwargs)
    names = list(bound)
    values = list(bound.values())
    sigvals = [s[0] for s in specialization]
    attrvals = ["" if s[0] == "constexpr" else s[1] for s in specialization]
    problems: list[str] = []
    constexprs = {}
    for path in find_paths_if(sigvals, lambda _, v: v == "constexpr"):
        name = _path_name(names, path)
        value = get_iterable_path(values, path)
        plain = _plain(value)
        if plain is _NOT_PLAIN:
            problems.append(
                f"constexpr argument {name} is a {type(value).__qualname__}: only ints, "
                f"floats, bools, strings, None and tl dtypes can be compiled from a record"
            )
            plain = repr(value)
        constexprs[name] = plain
    aligned = [
        _path_name(names, path)
        for path in find_paths_if(attrvals, lambda _, v: isinstance(v, str))
        if "D" in get_iterable_path(attrvals, path)
    ]
    return {
        "signature": {n: _lists(s) for n, s in zip(names, sigvals)},
        "constexprs": constexprs,
        "divisible_by_16": aligned,
        "num_warps": _int_or_none(options.get("num_warps")),
        "num_stages": _int_or_none(options.get("num_stages")),
        "maxnreg": _int_or_none(options.get("maxnreg")),
        "problems": problems,
    }


_NOT_PLAIN = object()


def _plain(value: Any) -> Any:
    """A constexpr value as json-able data (a dtype as ``{"dtype": "fp16"}``), or _NOT_PLAIN."""
    import triton.language as tl

    if isinstance(value, tl.constexpr):
        value = value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tl.dtype):
        return {"dtype": value.name}
    if isinstance(value, tuple):
        items = [_plain(v) for v in value]
        return _NOT_PLAIN if any(i is _NOT_PLAIN for i in items) else {"tuple": items}
    return _NOT_PLAIN


def _lists(value: Any) -> Any:
    """A (nested) tuple of types as lists, for json."""
    return [_lists(v) for v in value] if isinstance(value, tuple) else value


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def _path_name(names: list[str], path: tuple[int, ...]) -> str:
    """``x_ptr`` for ``(0,)``; ``pair[1]`` for ``(k, 1)``, a member of a tuple argument."""
    return names[path[0]] + "".join(f"[{i}]" for i in path[1:])


def _parse_path(names: list[str], text: str) -> tuple[int, ...]:
    """The inverse of :func:`_path_name`."""
    m = re.fullmatch(r"(\w+)((?:\[\d+\])*)", text)
    if m is None or m.group(1) not in names:
        raise ValueError(f"no parameter {text!r} among {names}")
    return (names.index(m.group(1)), *(int(i) for i in re.findall(r"\d+", m.group(2))))


# ---------------------------------------------------------------------------------------------
# Compiling, in a fresh process


def compile_launches(
    launches: Iterable[dict[str, Any]],
    archs: Iterable[int] = DEFAULT_ARCHS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    cache_dir: str | os.PathLike | None = None,
) -> list[dict[str, Any]]:
    """Compile recorded launches for real GPUs, in one fresh Python process, and report.

    Runs ``python -m grader.runtime.triton_compile`` with ``TRITON_INTERPRET`` unset; it
    re-creates each launch's module (:func:`kernel_source`) and compiles it with
    ``triton.compile`` for each architecture. A kernel the compiler rejects does not stop the
    others.

    Args:
        launches: what :func:`record_launches` recorded (plain dicts; they may have crossed a
            process boundary as json).
        archs: compute capabilities as ints, e.g. ``(90, 80)`` for sm_90 (H100) and sm_80
            (A100). Occupancy is computed for those in :data:`ARCH_LIMITS` (None for others).
        timeout_s: seconds for the whole process. The kernels not compiled by then come back
            with ``ok`` False, ``stage`` "timeout".
        cache_dir: Triton's cache folder for the process (``TRITON_CACHE_DIR``): a kernel
            compiled before with the same source, signature and options is read back instead of
            compiled. Default: this process's ``TRITON_CACHE_DIR`` if set, else
            ``<temporary folder>/course-triton-cache-<uid>``.

    Returns:
        One dict per launch and architecture, launches in order, each with its architectures in
        the order given::

            {"launch": 0, "kernel": "softmax_kernel", "arch": "sm_90", "ok": True,
             "stage": "compiled", "error": None, "registers": 26, "spills": 0,
             "spills_measure": "stack frame bytes per thread ...", "local_bytes": 0,
             "shared_bytes": 16, "num_warps": 4, "num_stages": 3, "occupancy": {...},
             "ttgir_excerpt": "...", "ptx_excerpt": "...", "compile_s": 0.61}

        ``registers`` are per thread; ``spills`` and ``local_bytes`` bytes per thread;
        ``shared_bytes`` Triton's shared memory per block (``metadata.shared``; the 1 KB the
        system reserves is not in it); ``num_warps``/``num_stages`` what the compiler used
        (Triton's defaults where the launch gave none); ``occupancy`` :func:`occupancy`'s dict.
        When ``ok`` is False, ``stage`` says where it stopped and ``error`` why, in the
        compiler's words where it has some: "record" (the launch could not be re-created: its
        ``problems``), "load" (the re-created module failed to import), "compile" (the
        compiler rejected the kernel: Triton's message with the source line it points at, or
        ptxas's), "launch" (compiled, but a GPU of that architecture refuses to launch it:
        too much shared memory per block, or too many registers for its threads; the figures
        are given), "inspect" (cuobjdump failed), "timeout" or "process" (the compile process
        was stopped or died: nothing is known about the kernel).

    Raises:
        ValueError: an architecture below 80 (Triton's Tensor Core path and this module's
            figures start at Ampere) or ``timeout_s`` not positive.
    """
    launches = list(launches)
    archs = [int(a) for a in archs]
    if any(a < 80 for a in archs):
        raise ValueError(f"architectures must be 80 or above (sm_80, sm_90...), got {archs}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    if not launches or not archs:
        return []
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    cache = Path(cache_dir or env.get("TRITON_CACHE_DIR") or _default_cache()).resolve()
    env["TRITON_CACHE_DIR"] = str(cache)
    # The process runs in the folder above grader/: sys.path[0] is then that folder, not the
    # caller's (whose files, a triton.py say, must not shadow the real modules).
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    request = json.dumps({"launches": launches, "archs": archs})
    proc = subprocess.Popen(
        [sys.executable, "-m", "grader.runtime.triton_compile"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=root,
        text=True,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(request, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the process and the ptxas it may run
        out, err = proc.communicate()
    done: dict[tuple[int, str], dict[str, Any]] = {}
    for line in out.splitlines():
        with contextlib.suppress(ValueError):
            result = json.loads(line)
            if isinstance(result, dict) and "launch" in result:
                done[(result["launch"], result["arch"])] = result
    results = []
    total = len(launches) * len(archs)
    for index, launch in enumerate(launches):
        for arch in archs:
            result = done.get((index, f"sm_{arch}"))
            if result is None:
                if timed_out:
                    stage = "timeout"
                    why = (
                        f"compilation did not finish within {timeout_s:g} s (the process "
                        f"compiled {len(done)} of {total} kernel-architecture pairs)"
                    )
                else:
                    stage = "process"
                    tail = "\n".join(err.strip().splitlines()[-15:])
                    why = (
                        f"the compile process exited with code {proc.returncode} before "
                        f"compiling this kernel:\n{tail}"
                    )
                result = _failure(index, launch.get("kernel"), arch, stage, why)
            results.append(result)
    return results


def _default_cache() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"course-triton-cache-{uid}"


def _failure(index: int, kernel: Any, arch: int, stage: str, error: str) -> dict[str, Any]:
    """A result with ``ok`` False and no figures."""
    return {
        "launch": index,
        "kernel": kernel,
        "arch": f"sm_{arch}",
        "ok": False,
        "stage": stage,
        "error": error,
        "registers": None,
        "spills": None,
        "spills_measure": SPILLS_MEASURE,
        "local_bytes": None,
        "shared_bytes": None,
        "num_warps": None,
        "num_stages": None,
        "occupancy": None,
        "ttgir_excerpt": "",
        "ptx_excerpt": "",
        "dots": [],
        "compile_s": None,
    }


def _main() -> None:
    """The compile process: a request on stdin, one json result a line on stdout."""
    os.environ.pop("TRITON_INTERPRET", None)
    results = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever triton, ptxas or MLIR print goes to stderr, not into the results
    sys.stdout = sys.stderr
    request = json.load(sys.stdin)
    for result in _compile_all(request["launches"], request["archs"]):
        results.write(json.dumps(result) + "\n")
        results.flush()


def _compile_all(launches: list[dict], archs: list[int]) -> Iterator[dict[str, Any]]:
    """Each launch for each architecture: a result dict (see :func:`compile_launches`)."""
    with tempfile.TemporaryDirectory(prefix="course-triton-compile-") as folder:
        yield from _compile_in(launches, archs, Path(folder))


def _compile_in(launches: list[dict], archs: list[int], workdir: Path) -> Iterator[dict]:
    modules: dict[str, Any] = {}
    for index, launch in enumerate(launches):
        name = launch.get("kernel")
        problems = launch.get("problems") or []
        if problems or not launch.get("source"):
            why = "; ".join(problems) or "the record has no source"
            for arch in archs:
                yield _failure(index, name, arch, "record", why)
            continue
        try:
            kernel = _load(launch, workdir, len(modules), modules)
        except Exception as e:  # noqa: BLE001 - reported, and the other launches go on
            why = f"the re-created module failed to import: {type(e).__name__}: {e}"
            for arch in archs:
                yield _failure(index, name, arch, "load", why)
            continue
        for arch in archs:
            yield _compile_one(index, launch, kernel, arch, workdir)


def _load(launch: dict, workdir: Path, n: int, modules: dict[str, Any]) -> Any:
    """The ``JITFunction`` the launch's source defines (each distinct source imported once,
    from a file, since Triton reads a kernel's source with ``inspect``)."""
    from triton.runtime.jit import JITFunction

    source = launch["source"]
    module = modules.get(source)
    if module is None:
        import importlib.util

        mod_name = f"course_kernels_{n}_{launch['kernel']}"
        path = workdir / f"{mod_name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
        modules[source] = module
    kernel = getattr(module, launch["kernel"], None)
    if not isinstance(kernel, JITFunction):
        raise TypeError(f"{launch['kernel']} is not a @triton.jit function in the module")
    return kernel


def _compile_one(index: int, launch: dict, kernel: Any, arch: int, workdir: Path) -> dict:
    """Compile one launch for one architecture and read its figures."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    name = launch["kernel"]
    names = kernel.arg_names
    try:
        signature = {k: _tuples(v) for k, v in launch["signature"].items()}
        constexprs = {_parse_path(names, k): _value(v) for k, v in launch["constexprs"].items()}
        attrs = {
            _parse_path(names, k): [["tt.divisibility", 16]]
            for k in launch.get("divisible_by_16", [])
        }
    except Exception as e:  # noqa: BLE001
        return _failure(index, name, arch, "record", f"the record does not fit {name}: {e}")
    # as given, 0 included (num_warps=0 is a config the compiler refuses, as on a GPU)
    options = {
        k: launch[k] for k in ("num_warps", "num_stages", "maxnreg") if launch.get(k) is not None
    }
    start = time.perf_counter()
    with _captured_output() as captured:
        try:
            compiled = triton.compile(
                ASTSource(kernel, signature, constexprs, attrs),
                target=GPUTarget("cuda", arch, 32),
                options=options,
            )
            error = None
        except Exception as e:  # noqa: BLE001 - the compiler's message is the result
            compiled, error = None, e
    seconds = round(time.perf_counter() - start, 3)
    if compiled is None:
        result = _failure(index, name, arch, "compile", _error_text(error, captured()))
        result["compile_s"] = seconds
        return result
    meta = compiled.metadata
    result = _failure(index, name, arch, "inspect", "")
    result.update(
        shared_bytes=int(meta.shared),
        num_warps=int(meta.num_warps),
        num_stages=int(meta.num_stages),
        compile_s=seconds,
        ttgir_excerpt=excerpt(compiled.asm.get("ttgir", ""), "ttgir"),
        ptx_excerpt=excerpt(compiled.asm.get("ptx", ""), "ptx"),
        dots=dots(compiled.asm.get("ttir", "")),
    )
    try:
        usage = _resource_usage(compiled.asm["cubin"], workdir / f"{index}_{arch}.cubin")
    except Exception as e:  # noqa: BLE001
        result["error"] = f"cuobjdump could not read the cubin: {type(e).__name__}: {e}"
        return result
    result.update(registers=usage["REG"], spills=usage["STACK"], local_bytes=usage["LOCAL"])
    if arch in ARCH_LIMITS:
        occ = occupancy(usage["REG"], result["shared_bytes"], result["num_warps"], arch)
        result["occupancy"] = occ
        if occ["launch_error"]:
            result.update(
                stage="launch",
                error=f"{occ['launch_error']} (limits of sm_{arch}, {ARCH_LIMITS[arch]['gpu']})",
            )
            return result
    result.update(ok=True, stage="compiled", error=None)
    return result


def _tuples(value: Any) -> Any:
    """json lists back to the tuples Triton's signatures use."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _value(value: Any) -> Any:
    """A recorded constexpr value back to what Triton takes (a dtype, a tuple)."""
    import triton.language as tl

    if isinstance(value, dict) and "dtype" in value:
        return tl.dtype(value["dtype"])
    if isinstance(value, dict) and "tuple" in value:
        return tuple(_value(v) for v in value["tuple"])
    return value


def _resource_usage(cubin: bytes, path: Path) -> dict[str, int]:
    """``REG``, ``STACK``, ``SHARED``, ``LOCAL`` of the cubin's kernel, from
    ``cuobjdump -res-usage`` (the cuobjdump bundled with Triton)."""
    from triton import knobs

    path.write_bytes(cubin)
    tool = knobs.nvidia.cuobjdump.path
    out = subprocess.run(
        [tool, "-res-usage", str(path)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    figures = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", out))
    if "REG" not in figures:
        raise ValueError(f"no REG figure in cuobjdump's output: {out.strip()[:300]!r}")
    return {k: int(figures.get(k, 0)) for k in ("REG", "STACK", "SHARED", "LOCAL")}


@contextlib.contextmanager
def _captured_output() -> Iterator[Any]:
    """Send file descriptors 1 and 2 to a temporary file inside the block (MLIR's diagnostics
    and ptxas's messages are written there, not raised); yields a function returning the text."""
    sys.stderr.flush()
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        saved = os.dup(1), os.dup(2)
        text: list[str] = []
        try:
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield lambda: "".join(text)
        finally:
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            text.append(tmp.read().decode("utf-8", "replace"))


def _error_text(error: BaseException, output: str) -> str:
    """The compiler's message, trimmed to what a student needs.

    A ``CompilationError``: the source line it points at (line numbers count from the ``def``)
    and the message, unwrapped from ``AssertionError("...")``; through a call into another
    ``@triton.jit`` function, each call site's line. ptxas: its ``ptxas`` lines. Anything else:
    its type and message, and the ``error:`` lines MLIR printed.
    """
    from triton.compiler.errors import CompilationError

    chain: list[BaseException] = []
    err: BaseException | None = error
    while err is not None and err not in chain and len(chain) < 10:
        chain.append(err)
        err = err.__cause__ or err.__context__
    compile_errors = [e for e in chain if isinstance(e, CompilationError)]
    if compile_errors:
        lines = []
        message = None
        for e in compile_errors:
            node, src = e.node, e.src or ""
            if hasattr(node, "lineno") and src:
                code = (
                    src.split("\n")[node.lineno - 1] if node.lineno <= src.count("\n") + 1 else ""
                )
                fn = re.match(r"\s*def\s+(\w+)", src)
                where = f"{fn.group(1)}, " if fn else ""
                lines.append(f"{where}line {node.lineno} of the def: {code.strip()}")
            if e.error_message:
                message = e.error_message
        if message is None:
            inner = next((e for e in chain if not isinstance(e, CompilationError)), None)
            message = f"{type(inner).__name__}: {inner}" if inner is not None else str(error)
        return "\n".join([*lines, _unwrap_repr(message)])[:2000]
    text = f"{type(error).__name__}: {error}"
    if "ptxas" in text:
        ptxas = [x.strip() for x in text.splitlines() if x.strip().startswith("ptxas")]
        if ptxas:
            return "ptxas rejected the kernel's PTX:\n" + "\n".join(ptxas[:10])
    diagnostics = [x.strip() for x in output.splitlines() if "error" in x.lower()][:10]
    return "\n".join([text.strip()[:1500], *diagnostics])


def _unwrap_repr(message: str) -> str:
    """``AssertionError("Loop-carried ...")`` -> ``AssertionError: Loop-carried ...``."""
    m = re.fullmatch(r"(\w+)\((['\"])(.*)\2\)", message.strip(), re.DOTALL)
    if m is None:
        return message.strip()
    return f"{m.group(1)}: {m.group(3)}".replace("\\'", "'").replace('\\"', '"')


if __name__ == "__main__":
    _main()
