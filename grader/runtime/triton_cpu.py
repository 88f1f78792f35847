"""Triton kernels on the CPU: Triton's interpreter, and the memory traffic a kernel makes in it.

For the checks and demos of the Triton notebook (issue 27): a student's ``@triton.jit`` kernel
runs on CPU tensors under Triton's interpreter, and :func:`count_traffic` reports what it did to
memory: the bytes it loaded and stored, per tensor argument, every access outside the tensors
it was given (the "missing mask" mistake), which it reports instead of performing, and the
elements its program instances share without atomics (races, right here and wrong on a GPU).

**Turning the interpreter on, and when it is too late.** ``TRITON_INTERPRET=1`` is not read once
when ``triton`` is imported: ``@triton.jit`` reads it each time it decorates a function
(``triton/runtime/jit.py``, ``jit()``'s inner ``decorator``: ``if knobs.runtime.interpret:
return InterpretedFunction(fn, ...)`` else ``JITFunction(fn, ...)``), and
``knobs.runtime.interpret`` is an ``env_bool`` whose ``get`` calls ``getenv_bool`` from
``libtriton`` at every access (``triton/knobs.py``). Nothing in the interpreter's launch path
reads it again (``interpreter.py``, ``InterpretedFunction.run`` -> ``GridExecutor.__call__``
runs the program instances). The same holds in triton 3.8.0 (torch 2.14.1) and 3.6.0 (torch
2.11, the GPU machines'). So, once ``triton`` was imported (``import torch`` does not import it;
``import torch._inductor`` does, and ``import triton`` imports ``triton.language``) with the
variable unset:

* a kernel decorated *before* the variable is set stays a ``JITFunction`` compiled for a GPU;
  launched without one it fails with "0 active drivers ([]). There should only be one."
  (``triton/runtime/driver.py``);
* a kernel decorated *after* is an ``InterpretedFunction``, but it fails as soon as it calls one
  of ``triton.language``'s own ``@jit`` helpers (``tl.sum``, ``tl.max``, ``tl.zeros``,
  ``tl.cdiv``, ``tl.sigmoid``, ``tl.softmax``...), which were decorated when ``triton.language``
  was imported: "Cannot call @triton.jit'd outside of the scope of a kernel"
  (``JITFunction.__call__``). Setting the variable late is therefore not enough by itself.

The clean ways, all usable at any time:

* :func:`use_interpreter` sets the variable for the rest of the process (a notebook's first cell
  on a machine without a GPU) and lets interpreted kernels call the library's helpers
  (:func:`_route_jit_calls`); :func:`interpreter` does the same for a ``with`` block only
  (tests, and a process that also runs Inductor's real GPU kernels, which must not be
  interpreted);
* :func:`ensure_interpreted` raises :class:`KernelNotInterpreted`, saying what to do, for a
  kernel decorated before; :func:`as_interpreted` returns an interpreted copy of it instead;
* :func:`count_traffic` runs every launch inside it under the interpreter, either kind of
  kernel, so a check works whatever the student's cells did first.

**What it counts.** The interpreter turns ``tl.load``/``tl.store`` (and tensor-descriptor loads
and stores, which materialize their pointers and end in the same calls) into
``InterpreterBuilder.create_masked_load``/``create_masked_store`` of its module-level
``interpreter_builder``
(``create_load``/``create_store`` call them with an all-true mask), with a numpy array of raw
addresses and one of the mask, then dereference the addresses in C++
(``libtriton.interpreter.load``/``store``). Masked-off lanes are not touched; unmasked lanes are,
whatever the address: an out-of-bounds load reads whatever lies there (or crashes, if the page
is unmapped) and an out-of-bounds store
corrupts the process's heap (seen on both versions: a later ``malloc`` aborts with "corrupted
double-linked list"). While :func:`count_traffic` is active those methods (and the atomics) are
wrapped: for each call, the active lanes are attributed to the tensor argument whose memory
holds most of them (its *extent*: from its first to one past its last element; for a
contiguous tensor its ``numel * element_size`` bytes), counted in bytes of the pointer's element
type, and any active lane outside that tensor is out of bounds: it is recorded, masked off (a
load gives ``other``, or 0) and never dereferenced. The tensors' addresses are those the
interpreter sees (``GridExecutor._init_args_hst``'s host copies; for CPU tensors, the tensors
themselves). ``GridExecutor`` and the builder are restored when the block ends. The masked-off
lanes of a load without ``other``, undefined on a GPU, are NaN there (integers: the type's
smallest value) instead of the interpreter's 0 (:func:`_undefined_lanes`).

**Races between program instances.** The interpreter runs a launch's program instances one
after another (``GridExecutor.__call__``: ``for x``, ``for y``, ``for z``, each after
``interpreter_builder.set_grid_idx``), so a kernel whose instances share data without atomics
gives the right answer here and a wrong one on a GPU, where they run at the same time (a
FlashAttention backward whose key-block programs each load-add-store into ``dQ``). So
:func:`count_traffic` also keeps, per launch and tensor argument, which instances loaded and
stored each element (of the tensor's element size) with plain ``tl.load``/``tl.store``, and
reports in :attr:`Traffic.races` (:class:`Race`) the elements two instances stored
(write-write), loaded by an instance after another stored them (read-after-write), or stored by
one after another loaded them (write-after-read). Not races: atomics (``tl.atomic_add``, ...,
neither as loads nor as stores); an instance that accesses an element several times by itself;
accesses in different launches (a launch ends before the next begins); and the plain accesses
an instance makes after it took a lock with ``tl.atomic_cas`` or ``tl.atomic_xchg`` (taken as
guarded by it, as in Triton's layer-norm backward tutorial, whether or not the lock is right).
Not detected: races between lanes or warps of one instance (a block is one numpy operation
here: no ordering inside an instance, ``tl.debug_barrier`` does nothing), reads of data that
an atomic of another instance updates, accesses of one memory through two different tensor
arguments, and memory order (``sem=``, ``scope=``) of atomics.

**What the interpreter can and cannot tell you, against a GPU.** It runs the program instances
one after another in Python, each over whole numpy blocks, so it gives the values a kernel
computes, the bytes it asks for, and which lanes reach outside its tensors. It cannot tell: time
(the interpreter is orders of magnitude slower than a GPU, and not in proportion to a kernel's
speed on one);
coalescing, cache hits (L1/L2), shared memory or registers (a load counted here is what the
kernel requests, not what reaches DRAM: on a GPU, a second read of a row may hit in L2); the
outcome of a race between program instances (they never run at once here: :func:`count_traffic`
reports the races, see above, but the values computed are those of one order); ``num_warps``,
``num_stages`` and other compilation options (ignored); the precision of ``tl.dot`` on Tensor
Cores (here ``np.matmul`` in the accumulator's dtype, no TF32 rounding: ``create_dot``); and the
last bits of libdevice's transcendental functions (see below).
``triton.autotune`` with more than one config fails on the CPU in both versions
(``Autotuner._bench`` asks ``driver.active`` for a benchmarker: "0 active drivers").
The interpreter is process-wide state: do not count from two threads at once.

**Triton 3.6 and NumPy 2.4.** Under triton 3.6's interpreter a loop bound that is a kernel
argument (``for k in range(0, K, BK)``) fails with "only 0-dimensional arrays can be converted to
Python scalars": its ``tl.tensor.__index__`` is ``int(array of shape (1,))``, which NumPy 2.4
refuses; triton 3.8 squeezes the array first. :func:`use_interpreter`, :func:`interpreter` and
:func:`count_traffic` install 3.8's conversion on 3.6 (once per process, nothing on 3.8).

**libdevice.** ``from triton.language.extra import libdevice`` then ``libdevice.tanh(x)`` in a
kernel fails under the interpreter of both versions ("cannot convert None of type <class
'NoneType'> to tensor": the module's functions are stubs a GPU compiler replaces;
:func:`_support_libdevice` says why). :func:`use_interpreter`, :func:`interpreter` and
:func:`count_traffic` make every libdevice function with a NumPy (or torch, or standard
library) equivalent run, whichever way it is reached (``libdevice.erf``, a name imported from
the module, ``tl.extra.cuda.libdevice.exp``), with the argument types, broadcasting and result
type of CUDA's declarations, and counted like any other kernel; the others (``jn``, ``yn``,
``rcp64h``, directed roundings of float64 arithmetic: :func:`_libdevice_table`) raise
:class:`LibdeviceNotSupported` naming the function. Installed once per process; the functions
are swapped in each launch's own patch scope, so Triton restores them with its own patches
when the launch ends, and a GPU compiler never sees them.

May import: the standard library, numpy, torch and triton (imported inside functions, so that
importing this module costs nothing); never :mod:`grader.checks`, :mod:`grader.grading` or
:mod:`grader.tools`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

#: The variable Triton reads when ``@triton.jit`` decorates a function (see the module docstring).
INTERPRET_ENV = "TRITON_INTERPRET"
#: At most this many :class:`OutOfBounds` records are kept per launch (the count goes on).
MAX_OUT_OF_BOUNDS_RECORDS = 20


class KernelNotInterpreted(RuntimeError):
    """A kernel that was compiled for a GPU (a ``JITFunction``) where the interpreter is needed."""


class OutOfBoundsError(RuntimeError):
    """A kernel accessed memory outside every tensor it was given (``on_out_of_bounds="raise"``).

    Attributes:
        record: the :class:`OutOfBounds` access.
    """

    def __init__(self, record: OutOfBounds) -> None:
        super().__init__(record.describe())
        self.record = record


@dataclass(frozen=True)
class TensorTraffic:
    """The memory traffic of a kernel to one tensor argument. All figures in bytes.

    Attributes:
        loaded_bytes: bytes loaded, over all loads (a byte read twice counts twice).
        stored_bytes: bytes stored, over all stores.
        distinct_loaded_bytes: bytes of the tensor read at least once.
        distinct_stored_bytes: bytes of the tensor written at least once.
        nbytes: the tensor's size, ``numel * element_size``.
        address: the address of its first element as the kernel saw it (for a CPU tensor, its
            ``data_ptr()``), so a check can tell which of its own tensors an argument was; not
            compared (two counts of the same launch on different tensors are equal).
    """

    loaded_bytes: int = 0
    stored_bytes: int = 0
    distinct_loaded_bytes: int = 0
    distinct_stored_bytes: int = 0
    nbytes: int = 0
    address: int = field(default=0, compare=False)


@dataclass(frozen=True)
class OutOfBounds:
    """Lanes of one load or store that reached outside every tensor argument (or across from one
    tensor into another).

    Attributes:
        kernel: the kernel's name.
        op: ``"load"``, ``"store"`` or ``"atomic"``.
        program_id: the program instance, ``(x, y, z)``.
        lanes: how many active (unmasked) lanes were out of bounds.
        where: where the first of them pointed, in words, e.g. "1 element(s) past the end of
            `x_ptr` (1000 elements of 4 bytes)".
    """

    kernel: str
    op: str
    program_id: tuple[int, int, int]
    lanes: int
    where: str

    def describe(self) -> str:
        """One sentence for a student."""
        return (
            f"{self.kernel}: a {self.op} in program instance {self.program_id} reached outside "
            f"the tensors it was given on {self.lanes} unmasked lane(s), the first {self.where}; "
            f"a mask (e.g. mask=offsets < n) keeps the lanes past the end from touching memory"
        )


@dataclass(frozen=True)
class Race:
    """Program instances of one launch that accessed the same elements of a tensor argument, one
    of them with a plain (non-atomic) store: on a GPU they run at the same time, in no set order.

    Attributes:
        kernel: the kernel's name.
        tensor: the tensor argument, by the kernel's parameter name (as in
            :attr:`Traffic.per_tensor`).
        kind: ``"write-write"`` (two instances stored the element), ``"read-after-write"`` (an
            instance loaded it after another stored it: here it saw the stored value, on a GPU
            it may see the old one) or ``"write-after-read"`` (an instance stored it after
            another loaded it: here the load saw the old value, on a GPU it may see the new one).
        elements: how many distinct elements of the tensor (of its element size) raced so.
        example: ``(first, second, offset)``: two such program instances ``(x, y, z)``, in the
            order the interpreter ran them, and the element, counted in elements from the
            tensor's first one (its offset in memory, for a strided tensor).
    """

    kernel: str
    tensor: str
    kind: str
    elements: int
    example: tuple[tuple[int, int, int], tuple[int, int, int], int]

    def describe(self) -> str:
        """One sentence for a student."""
        first, second, offset = self.example
        where = f"element {offset} of `{self.tensor}`"
        more = f" ({self.elements} element(s) in all)"
        if self.kind == "write-write":
            what = (
                f"program instances {first} and {second} both stored {where}{more} with a plain "
                f"store: on a GPU they run at the same time, so which value stays is undefined "
                f"(a load-add-store loses updates)"
            )
        elif self.kind == "read-after-write":
            what = (
                f"program instance {second} loaded {where}{more} after instance {first} stored "
                f"it: here instances run one after another, so it saw the stored value; on a "
                f"GPU they run at the same time and it may read the old one"
            )
        else:
            what = (
                f"program instance {second} stored {where}{more} after instance {first} loaded "
                f"it: here the load saw the old value; on a GPU it may see the new one"
            )
        return (
            f"{self.kernel}: {what}. Use an atomic (tl.atomic_add, tl.atomic_max...) for what "
            f"several instances update, or give each element to one program instance"
        )


@dataclass
class Traffic:
    """What one or more kernel launches did to memory, counted under Triton's interpreter.

    Attributes:
        loads_bytes: bytes loaded by all launches (masked-off lanes not counted).
        stores_bytes: bytes stored by all launches.
        per_tensor: for each tensor argument, by the kernel's parameter name (``"x"``; a tuple
            argument's items as ``"name[i]"``), its :class:`TensorTraffic`. Over several
            launches, figures of the same name are added (distinct bytes per launch, summed).
            Arguments that share memory (``out`` is ``x``): each access counts for the first
            parameter holding most of its lanes.
        out_of_bounds: the accesses outside the tensors (at most
            :data:`MAX_OUT_OF_BOUNDS_RECORDS` per launch); empty when the kernel stayed inside.
        out_of_bounds_lanes: how many lanes were out of bounds in all (every one, not only the
            recorded ones).
        launches: ``(kernel name, grid)`` of each launch, grid as ``(x, y, z)``, in order.
        storing_programs: how many program instances stored at least one in-bounds lane (an
            instance of a padded grid that does nothing is not one), over all launches.
        races: the :class:`Race` records of each launch (at most one per tensor and kind), in
            order; empty when no two program instances of a launch touched an element that one
            of them stored with a plain store. Atomics are not races; see the module docstring
            for what is and is not detected.
    """

    loads_bytes: int = 0
    stores_bytes: int = 0
    per_tensor: dict[str, TensorTraffic] = field(default_factory=dict)
    out_of_bounds: list[OutOfBounds] = field(default_factory=list)
    out_of_bounds_lanes: int = 0
    launches: list[tuple[str, tuple[int, int, int]]] = field(default_factory=list)
    storing_programs: int = 0
    races: list[Race] = field(default_factory=list)

    @property
    def in_bounds(self) -> bool:
        """True when no lane of any load or store reached outside the tensors."""
        return self.out_of_bounds_lanes == 0

    @property
    def race_free(self) -> bool:
        """True when no launch had a :class:`Race` between its program instances."""
        return not self.races

    def add(self, other: Traffic) -> Traffic:
        """The sum of this and ``other`` (a new object)."""
        per = dict(self.per_tensor)
        for name, t in other.per_tensor.items():
            mine = per.get(name, TensorTraffic())
            per[name] = TensorTraffic(
                mine.loaded_bytes + t.loaded_bytes,
                mine.stored_bytes + t.stored_bytes,
                mine.distinct_loaded_bytes + t.distinct_loaded_bytes,
                mine.distinct_stored_bytes + t.distinct_stored_bytes,
                max(mine.nbytes, t.nbytes),
                mine.address or t.address,
            )
        return Traffic(
            self.loads_bytes + other.loads_bytes,
            self.stores_bytes + other.stores_bytes,
            per,
            self.out_of_bounds + other.out_of_bounds,
            self.out_of_bounds_lanes + other.out_of_bounds_lanes,
            self.launches + other.launches,
            self.storing_programs + other.storing_programs,
            self.races + other.races,
        )


# ---------------------------------------------------------------------------------------------
# The interpreter switch


def _repair_interpreter_index() -> None:
    """Give triton 3.6's interpreter the scalar-to-int conversion of triton 3.8.

    Under the interpreter a scalar is a numpy array of shape ``(1,)``; ``range(0, K, BK)`` in a
    kernel calls ``tl.tensor.__index__``, which triton 3.6 sets to ``int(self.handle.data)``
    (``interpreter.py``, ``_patch_lang_tensor``) and NumPy 2.4 refuses ("only 0-dimensional
    arrays can be converted to Python scalars"); triton 3.8 squeezes the array first. This wraps
    ``_patch_lang_tensor`` once, only where its source has the old form, to set 3.8's version.
    """
    import inspect

    from triton.runtime import interpreter as interp

    original = interp._patch_lang_tensor
    if getattr(original, "_course_repaired", False):
        return
    try:
        source = inspect.getsource(original)
    except (OSError, TypeError):
        return
    if "int(self.handle.data)" not in source:
        return

    def patch_lang_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor._course_repaired = True  # type: ignore[attr-defined]
    interp._patch_lang_tensor = patch_lang_tensor


#: id(JITFunction) -> (the JITFunction, kept alive; its InterpretedFunction copy).
_INTERPRETED: dict[int, tuple[Any, Any]] = {}


def _interpreted_copy(jit_fn: Any) -> Any:
    """An ``InterpretedFunction`` of a ``JITFunction``'s Python function (made once)."""
    from triton.runtime.interpreter import InterpretedFunction

    key = id(jit_fn)
    if key not in _INTERPRETED:
        _INTERPRETED[key] = (jit_fn, InterpretedFunction(jit_fn.fn))
    return _INTERPRETED[key][1]


def _inside_interpreted_launch() -> bool:
    """Whether an interpreted launch is running: the interpreter gives ``tl.tensor`` an
    ``__index__`` for the launch (``_patch_lang_tensor``) and takes it away afterwards."""
    import triton.language as tl

    return "__index__" in vars(tl.core.tensor)


def _route_jit_calls() -> None:
    """Let an interpreted kernel call functions that were decorated while the interpreter was off.

    ``triton.language``'s own helpers (``tl.sum``, ``tl.max``, ``tl.zeros``, ``tl.cdiv``,
    ``tl.sigmoid``, ``tl.softmax``, ``tl.argmax``, ``tl.cumsum``... 48 of them in triton 3.6, 50
    in 3.8) are ``@jit`` functions decorated when ``import triton`` imports
    ``triton.language``. Unless ``TRITON_INTERPRET=1`` was set before that, they are
    ``JITFunction`` objects, and an interpreted kernel that calls one stops with "Cannot call
    @triton.jit'd outside of the scope of a kernel" (``JITFunction.__call__``). This wraps
    ``JITFunction.__call__`` once per process: during an interpreted launch the call runs the
    function under the interpreter; otherwise it raises as before. Compilation for a GPU never
    calls it (the code generator inlines a ``JITFunction`` through ``call_JitFunction``).
    """
    from triton.runtime.jit import JITFunction

    original = JITFunction.__call__
    if getattr(original, "_course_routes", False):
        return

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _inside_interpreted_launch():
            return _interpreted_copy(self)(*args, **kwargs)
        return original(self, *args, **kwargs)

    __call__._course_routes = True  # type: ignore[attr-defined]
    JITFunction.__call__ = __call__


# ---------------------------------------------------------------------------------------------
# libdevice under the interpreter


class LibdeviceNotSupported(NotImplementedError):
    """A kernel called, under the interpreter, a libdevice function this module has no NumPy
    equivalent for (see :func:`_libdevice_table`); the message names it."""


class _NoEquivalent(Exception):
    """Raised by a libdevice implementation for argument types it cannot reproduce exactly."""


#: The names of the libdevice functions being called by an interpreted kernel, innermost last:
#: ``create_extern_elementwise`` only gets the backend's symbol (``__nv_tanhf``).
_LIBDEVICE_CALLS: list[str] = []
#: The ``_LangPatchScope`` of the interpreted launch in progress (``GridExecutor.__call__``'s).
_LAUNCH_SCOPE: list[Any] = []
#: ``_patch_lang`` functions found not to need (or allow) :func:`_support_libdevice`'s wrapper.
_NOT_PATCHED: list[Any] = []


def _libdevice_modules() -> tuple[Any, list[Any]]:
    """``triton.language.extra.libdevice`` (the stubs kernels import; a GPU compiler maps that
    module to its backend's) and the backends' own modules, CUDA's first
    (``triton.language.extra.cuda.libdevice``, ``...hip.libdevice``)."""
    import importlib
    import sys

    try:
        stub = importlib.import_module("triton.language.extra.libdevice")
    except ImportError:
        stub = None
    extra = sys.modules.get("triton.language.extra")
    names = sorted(getattr(extra, "__all__", []), key=lambda n: not n.endswith(".cuda"))
    backends = [sys.modules[n].libdevice for n in names if hasattr(sys.modules.get(n), "libdevice")]
    return stub, backends


class _Namespace:
    """A module's globals as attributes, so that a ``_LangPatchScope`` can swap one of them (a
    libdevice function imported by name) for the launch and put it back afterwards."""

    def __init__(self, namespace: dict) -> None:
        object.__setattr__(self, "_namespace", namespace)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._namespace[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._namespace[name] = value

    def __delattr__(self, name: str) -> None:
        del self._namespace[name]


def _support_libdevice() -> None:
    """Let interpreted kernels call libdevice functions (``libdevice.tanh(x)``, ``erf``, ``pow``...).

    Why they fail (triton 3.6 and 3.8 alike): ``triton.language.extra.libdevice`` holds stubs
    (``def tanh(arg0): ...``, returning None) that a GPU compiler replaces by its backend's
    module (the backend's ``get_module_map``; ``code_generator.py`` maps the module and the
    functions imported from it), each function of which is a builtin calling
    ``core.extern_elementwise`` with the libdevice symbol (``__nv_tanhf`` for float32). The
    interpreter's ``_patch_lang`` patches the builtins of ``tl``, ``tl.math`` and ``tl.core``
    only: the stub runs as Python and its None reaches ``tl.store`` ("cannot convert None of
    type <class 'NoneType'> to tensor"); the backend's own function, called directly, gets no
    ``_semantic`` ("Did you forget to add @triton.jit ?"); and the interpreter's
    ``create_extern_elementwise`` raises NotImplementedError.

    This wraps ``_patch_lang`` once per process (it is called at the start of each launch, by
    ``GridExecutor.__call__``, and of each call of a ``@jit`` function inside it): for a function
    that refers to libdevice, the stubs are swapped for the backend's functions (CUDA's) run
    with the interpreter's semantic, and ``InterpreterBuilder.create_extern_elementwise``
    computes the function with NumPy (:func:`_libdevice_table`), in the launch's own patch scope,
    so Triton restores them with its other patches when the launch ends: outside a launch, and
    for a GPU compiler, the modules are as before. Argument types are checked, broadcast and
    promoted by the backend's own code, as on a GPU; the result has the type it declares.
    Nothing is installed where the interpreter runs extern functions itself, or where
    ``_patch_lang`` or its scope do not have the shape described.
    """
    import inspect

    from triton.runtime import interpreter as interp

    original = interp._patch_lang
    if getattr(original, "_course_libdevice", False) or original in _NOT_PATCHED:
        return
    _NOT_PATCHED.append(original)  # looked at once: removed below where it is wrapped
    try:
        extern_source = inspect.getsource(interp.InterpreterBuilder.create_extern_elementwise)
        patch_source = inspect.getsource(original)
    except (AttributeError, OSError, TypeError):
        return
    if "NotImplementedError" not in extern_source or "libdevice" in patch_source:
        return
    stub, backends = _libdevice_modules()
    if stub is None and not backends:
        return
    modules = [m for m in (stub, *backends) if m is not None]
    module_names = {m.__name__ for m in modules}
    semantic = getattr(interp, "interpreter_semantic", None)
    if semantic is None:
        from triton.language.semantic import TritonSemantic

        semantic = TritonSemantic(interp.interpreter_builder)

    def interpreted(member: Any) -> Any:
        """The backend's builtin ``member``, run with the interpreter's semantic."""
        name = member.__name__

        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs.pop("_semantic", None)
            _LIBDEVICE_CALLS.append(name)
            try:
                return member(*args, _semantic=semantic, **kwargs)
            finally:
                _LIBDEVICE_CALLS.pop()

        call.__name__ = call.__qualname__ = name
        return call

    def unsupported(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise LibdeviceNotSupported(_not_supported(name, "no backend defines it"))

        return call

    def replacements() -> dict[tuple[str, str], Any]:
        """(module name, function name) -> its interpreted version, for every libdevice module."""
        from triton.language.core import is_builtin

        out: dict[tuple[str, str], Any] = {}
        for module in backends:
            for name, member in vars(module).items():
                if is_builtin(member):
                    out[module.__name__, name] = interpreted(member)
        if stub is not None:
            first = backends[0].__name__ if backends else ""
            for name, member in vars(stub).items():
                if inspect.isfunction(member) and member.__module__ == stub.__name__:
                    out[stub.__name__, name] = out.get((first, name)) or unsupported(name)
        return out

    table: dict[tuple[str, str], Any] = {}

    def reaches(fn: Any) -> list[tuple[str, Any]]:
        """Whether ``fn`` refers to libdevice, and the libdevice functions its globals bind."""
        code = getattr(fn, "__code__", None)
        namespace = getattr(fn, "__globals__", None)
        if code is None or namespace is None:
            return []
        found = [("", None)] if "libdevice" in code.co_names else []
        for name in code.co_names:
            value = namespace.get(name)
            if value is None:
                continue
            if inspect.ismodule(value) and value.__name__ in module_names:
                found.append(("", None))
            elif inspect.isfunction(value) and getattr(value, "__module__", None) in module_names:
                found.append((name, value))
        return found

    def patch_lang(fn: Any) -> Any:
        import sys

        scope = original(fn)
        if not hasattr(scope, "set_attr") or not hasattr(scope, "restore"):
            return scope
        caller = sys._getframe(1).f_locals.get("self")
        opens = isinstance(caller, interp.GridExecutor)  # a launch begins; it restores `scope`
        if opens:
            _LAUNCH_SCOPE.append(scope)
            restore = scope.restore

            def restore_and_close() -> None:
                try:
                    restore()
                finally:
                    if scope in _LAUNCH_SCOPE:
                        _LAUNCH_SCOPE.remove(scope)

            scope.restore = restore_and_close
        try:
            # A @jit function called inside the launch discards its own scope: what it needs
            # goes into the launch's, so that everything is put back when the launch ends.
            launch = _LAUNCH_SCOPE[-1] if _LAUNCH_SCOPE else None
            found = reaches(fn) if launch is not None else []
            if found:
                patch(fn, launch, found)
        except BaseException:
            if opens:
                scope.restore()
            raise
        return scope

    def patch(fn: Any, launch: Any, found: list[tuple[str, Any]]) -> None:
        if not table:
            table.update(replacements())
        if not getattr(launch, "_course_libdevice", False):
            launch._course_libdevice = True
            launch.set_attr(interp.InterpreterBuilder, "create_extern_elementwise",
                            _create_extern_elementwise)  # fmt: skip
            for module in modules:
                for (module_name, name), member in table.items():
                    if module_name == module.__name__:
                        launch.set_attr(module, name, member)
        namespace = _Namespace(fn.__globals__)
        for name, value in found:
            member = table.get((value.__module__, value.__name__)) if value is not None else None
            if member is not None:
                launch.set_attr(namespace, name, member)

    patch_lang._course_libdevice = True  # type: ignore[attr-defined]
    interp._patch_lang = patch_lang
    _NOT_PATCHED.remove(original)


def _not_supported(name: str, why: str) -> str:
    return (
        f"libdevice.{name} is not supported under Triton's interpreter ({why}); on a GPU it "
        f"runs as usual. Use a triton.language function instead where there is one (tl.exp, "
        f"tl.log, tl.sqrt, tl.erf, tl.fma...), or check this kernel on a GPU"
    )


def _create_extern_elementwise(
    self: Any, lib_name: str, lib_path: str, symbol: str, args: list, ret_type: Any, is_pure: bool
) -> Any:
    """``InterpreterBuilder.create_extern_elementwise`` for libdevice: the function named by the
    innermost libdevice call, computed with NumPy on the (already broadcast) arguments, cast
    to the declared result type."""
    import numpy as np
    from triton.runtime import interpreter as interp

    name = _LIBDEVICE_CALLS[-1] if _LIBDEVICE_CALLS else None
    if name is None:
        raise LibdeviceNotSupported(
            f"the external function {symbol} ({lib_name or 'no library'}) is not supported "
            f"under Triton's interpreter"
        )
    impl = _libdevice_table().get(name)
    data = [np.asarray(a.data) for a in args]
    types = ", ".join(str(a.dtype) for a in args)
    if impl is None:
        raise LibdeviceNotSupported(_not_supported(name, f"{symbol}: no NumPy equivalent here"))
    ret = getattr(ret_type, "scalar", ret_type)
    with np.errstate(all="ignore"):
        try:
            out = np.asarray(impl(*data))
        except _NoEquivalent as e:
            raise LibdeviceNotSupported(_not_supported(name, f"{symbol} on {types}: {e}")) from None
    want = interp._get_np_dtype(ret)
    if out.dtype != want:
        out = out.astype(want)
    return interp.TensorHandle(np.ascontiguousarray(out), ret)


_LIBDEVICE_TABLE: dict[str, Callable[..., Any]] = {}


def _libdevice_table() -> dict[str, Callable[..., Any]]:
    """libdevice function name -> its NumPy equivalent, on NumPy arrays of the argument types
    the backend accepted (float32 and float64 for the math; the integer types it declares for
    the bit functions), computed in the argument's precision and cast by the caller to the
    declared result type.

    Left out (they raise :class:`LibdeviceNotSupported`): ``jn``, ``yn`` (Bessel functions of
    integer order) and ``rcp64h``, which have no NumPy or standard-library equivalent, and the
    directed roundings (``_rz``, ``_rd``, ``_ru``) of float64 arithmetic and of 64-bit integer
    to float conversions, which NumPy cannot round that way. Directed roundings of float32
    arithmetic are exact (computed in float64, whose result of one operation on float32
    operands is exact or cannot lie on a float32 boundary, with the error of sums kept:
    TwoSum). Not bit-exact with a GPU: the transcendental functions (NumPy's and torch's are
    within a few ulp, as libdevice's are, not the same ulp), the ``fast_`` approximations
    (computed exactly here), and ``fma`` on float64 (``a * b + c``, rounded twice, as the
    interpreter's own ``tl.fma``).
    """
    if _LIBDEVICE_TABLE:
        return _LIBDEVICE_TABLE
    import math

    import numpy as np
    import torch

    f32 = np.dtype(np.float32)

    def wide(x: Any) -> Any:
        return x.astype(np.float64)

    def in_torch(fn: Callable) -> Callable:
        """A ``torch.special`` function, in float64 (float32 results rounded once)."""
        return lambda x: fn(torch.from_numpy(wide(x))).numpy().astype(x.dtype)

    def lane_by_lane(fn: Callable, nargs: int = 1) -> Callable:
        """A ``math`` function over every lane, in float64 (no vectorized equivalent)."""

        def safe(*values: float) -> float:
            try:
                return fn(*values)
            except (ValueError, ZeroDivisionError):
                return math.nan
            except OverflowError:
                return math.inf

        apply = np.frompyfunc(safe, nargs, 1)
        return lambda *xs: np.asarray(apply(*map(wide, xs)), dtype=np.float64).astype(xs[0].dtype)

    def gamma(x: float) -> float:
        if x == 0:
            return math.copysign(math.inf, x)
        if x < 0 and x == math.floor(x) or x == -math.inf:
            return math.nan
        try:
            return math.gamma(x)
        except OverflowError:
            return math.inf

    def same_type(fn: Callable) -> Callable:
        """A float32-or-float64 function computed in float64 for float32 (then rounded once)."""
        return lambda *xs: fn(*[wide(x) if x.dtype == f32 else x for x in xs]).astype(xs[0].dtype)

    # float32 results of exact float64 values with directed rounding
    toward = {"rd": -np.inf, "ru": np.inf, "rz": 0.0}

    def round_f32(v: Any, err: Any, mode: str) -> Any:
        """float64 ``v`` (+ its exact error ``err``) rounded to float32 in ``mode``."""
        f = v.astype(np.float32)
        fv = f.astype(np.float64)
        above = (v > fv) | ((v == fv) & (err > 0))  # the exact value is above f
        below = (v < fv) | ((v == fv) & (err < 0))
        if mode == "rn":  # v exactly halfway between two float32 values, the exact one not
            g = np.nextafter(f, np.where(v > fv, np.float32(np.inf), np.float32(-np.inf)))
            mid = (fv + g.astype(np.float64)) / 2
            to_g = (v == mid) & (err != 0) & (np.sign(err) == np.sign(g.astype(np.float64) - fv))
            return np.where(to_g, g, f)
        move = {"rd": below, "ru": above, "rz": (below & (f > 0)) | (above & (f < 0))}[mode]
        return np.where(move, np.nextafter(f, np.float32(toward[mode])), f)

    def two_sum(a: Any, b: Any) -> tuple[Any, Any]:
        s = a + b
        bb = s - a
        return s, (a - (s - bb)) + (b - bb)

    def float32_only(mode: str, op: Callable) -> Callable:
        """An arithmetic libdevice function with rounding ``mode``: exact for float32, NumPy's
        (round to nearest) for float64 with ``rn``, no equivalent for float64 otherwise."""

        def run(*xs: Any) -> Any:
            if xs[0].dtype == f32:
                v, err = op(*map(wide, xs))
                return round_f32(v, err, mode)
            if mode != "rn":
                raise _NoEquivalent("NumPy rounds float64 arithmetic to nearest only")
            v, _ = op(*xs)
            return v

        return run

    exact = {
        "add": lambda a, b: two_sum(a, b),
        "sub": lambda a, b: two_sum(a, -b),
        "mul": lambda a, b: (a * b, 0.0),
        "div": lambda a, b: (a / b, 0.0),
        "rcp": lambda a: (1.0 / a, 0.0),
        "sqrt": lambda a: (np.sqrt(a), 0.0),
        "fma": lambda a, b, c: two_sum(a * b, c),
    }

    # integer results: saturating conversions, as the GPU's cvt (NaN gives 0)
    rounders = {"rn": np.rint, "rz": np.trunc, "rd": np.floor, "ru": np.ceil}

    def c_round(x: Any) -> Any:  # half away from zero
        t = np.trunc(x)
        return np.where(np.abs(x - t) >= 0.5, t + np.copysign(np.ones_like(x), x), t)

    def to_int(rounding: Callable, dtype: Any) -> Callable:
        def run(x: Any) -> Any:
            info = np.iinfo(dtype)
            r = rounding(x).astype(np.float64)
            big, small, nan = r >= float(info.max) + 1, r < float(info.min), np.isnan(r)
            out = np.where(big | small | nan, 0, r).astype(dtype)
            out[big], out[small], out[nan] = info.max, info.min, 0
            return out

        return run

    # bits
    def unsigned(x: Any) -> Any:
        return np.ascontiguousarray(x).view(np.dtype(f"u{x.dtype.itemsize}"))

    def bit_length(u: Any) -> Any:
        u = u.astype(np.uint64)
        n = np.zeros(u.shape, dtype=np.int32)
        for s in (32, 16, 8, 4, 2, 1):
            big = u >= np.uint64(1 << s)
            n += big.astype(np.int32) * s
            u = np.where(big, u >> np.uint64(s), u)
        return n + (u > 0)

    def popcount(x: Any) -> Any:
        u = unsigned(x)
        if hasattr(np, "bitwise_count"):
            return np.bitwise_count(u).astype(np.int32)
        bits = np.unpackbits(u.view(np.uint8).reshape(-1, u.dtype.itemsize), axis=1)
        return bits.sum(axis=1).astype(np.int32).reshape(u.shape)

    def brev(x: Any) -> Any:
        k = x.dtype.itemsize
        bits = np.unpackbits(unsigned(x).view(np.uint8).reshape(-1, k), axis=1, bitorder="little")
        packed = np.packbits(bits[:, ::-1], axis=1, bitorder="little")
        return np.ascontiguousarray(packed).view(x.dtype).reshape(x.shape)

    def mulhi(a: Any, b: Any) -> Any:
        if a.dtype.itemsize == 4:
            w = np.int64 if a.dtype.kind == "i" else np.uint64
            return (a.astype(w) * b.astype(w)) >> 32
        high = np.frompyfunc(lambda p, q: (int(p) * int(q)) >> 64, 2, 1)
        return np.asarray(high(a, b), dtype=object).astype(a.dtype)

    def mul24(a: Any, b: Any) -> Any:
        if a.dtype.kind == "i":
            a24 = ((a.astype(np.int32) << 8) >> 8).astype(np.int64)
            b24 = ((b.astype(np.int32) << 8) >> 8).astype(np.int64)
            return (a24 * b24).astype(np.int32)
        return ((a & 0xFFFFFF).astype(np.uint64) * (b & 0xFFFFFF)).astype(np.uint32)

    def halving(plus: int) -> Callable:
        def run(a: Any, b: Any) -> Any:
            w = np.int64 if a.dtype.kind == "i" else np.uint64
            return ((a.astype(w) + b.astype(w) + w(plus)) >> w(1)).astype(a.dtype)

        return run

    def sad(a: Any, b: Any, c: Any) -> Any:
        return (np.abs(a.astype(np.int64) - b.astype(np.int64)) + c.astype(np.int64)).astype(
            a.dtype
        )

    def byte_perm(x: Any, y: Any, s: Any) -> Any:
        def wide_bits(v: Any) -> Any:
            return v.astype(np.uint32).astype(np.uint64)

        v = (wide_bits(y) << np.uint64(32)) | wide_bits(x)
        s = wide_bits(s)
        out = np.zeros(v.shape, dtype=np.uint64)
        for n in range(4):
            sel = (s >> np.uint64(4 * n)) & np.uint64(7)
            out |= ((v >> (sel * np.uint64(8))) & np.uint64(0xFF)) << np.uint64(8 * n)
        return out.astype(np.uint32).view(np.int32)

    def words(x: Any, which: int) -> Any:
        return np.ascontiguousarray(x).view(np.int32).reshape(*x.shape, 2)[..., which]

    def hilo(hi: Any, lo: Any) -> Any:
        h = hi.astype(np.uint32).astype(np.uint64) << np.uint64(32)
        return (h | lo.astype(np.uint32).astype(np.uint64)).view(np.float64)

    def logb(x: Any) -> Any:
        _, e = np.frexp(x)
        out = (e - 1).astype(x.dtype)
        out = np.where(x == 0, -np.inf, out)
        return np.where(np.isinf(x), np.inf, np.where(np.isnan(x), x, out)).astype(x.dtype)

    def ilogb(x: Any) -> Any:
        _, e = np.frexp(x)
        out = (e - 1).astype(np.int32)
        low, high = np.iinfo(np.int32).min, np.iinfo(np.int32).max
        return np.where((x == 0) | np.isnan(x), low, np.where(np.isinf(x), high, out))

    def fdim(x: Any, y: Any) -> Any:
        d = x - y
        return np.where(np.isnan(d) | (d > 0), d, np.zeros_like(d))

    def norm(*xs: Any) -> Any:
        out = xs[0]
        for x in xs[1:]:
            out = np.hypot(out, x)
        return out

    def flag(fn: Callable) -> Callable:
        return lambda x: fn(x).astype(np.int32)

    def sinpi(x: Any) -> Any:  # reduced exactly to [-1, 1] first; 0 at the integers
        r = x - 2.0 * np.round(x / 2.0)
        return np.where(r == np.trunc(r), np.copysign(0.0, x), np.sin(np.pi * r))

    def cospi(x: Any) -> Any:  # 0 at the half-integers
        r = np.abs(x - 2.0 * np.round(x / 2.0))
        return np.where(r == 0.5, 0.0, np.cos(np.pi * r))

    table: dict[str, Callable[..., Any]] = {
        # elementary functions, in the argument's precision
        "exp": np.exp, "exp2": np.exp2, "expm1": np.expm1,
        "exp10": lambda x: np.power(x.dtype.type(10), x),
        "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
        "sin": np.sin, "cos": np.cos, "tan": np.tan,
        "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "atan2": np.arctan2,
        "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
        "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
        "sinpi": same_type(sinpi), "cospi": same_type(cospi),
        "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
        "rsqrt_rn": same_type(lambda x: 1 / np.sqrt(x)),
        "cbrt": np.cbrt, "rcbrt": lambda x: 1 / np.cbrt(x),
        "hypot": np.hypot, "rhypot": lambda x, y: 1 / np.hypot(x, y),
        "norm3d": norm, "norm4d": norm,
        "rnorm3d": lambda *xs: 1 / norm(*xs), "rnorm4d": lambda *xs: 1 / norm(*xs),
        "pow": lambda x, y: np.power(x, y.astype(x.dtype)),
        "fast_expf": np.exp, "fast_exp10f": lambda x: np.power(np.float32(10), x),
        "fast_logf": np.log, "fast_log2f": np.log2, "fast_log10f": np.log10,
        "fast_sinf": np.sin, "fast_cosf": np.cos, "fast_tanf": np.tan,
        "fast_powf": np.power, "fast_dividef": np.divide,
        # special functions: torch's, or the standard library's lane by lane
        "erf": in_torch(torch.special.erf), "erfc": in_torch(torch.special.erfc),
        "erfinv": in_torch(torch.special.erfinv), "erfcx": in_torch(torch.special.erfcx),
        "erfcinv": in_torch(lambda t: -torch.special.ndtri(t / 2) / math.sqrt(2)),
        "normcdf": in_torch(torch.special.ndtr), "normcdfinv": in_torch(torch.special.ndtri),
        "lgamma": in_torch(torch.special.gammaln), "tgamma": lane_by_lane(gamma),
        "j0": in_torch(torch.special.bessel_j0), "j1": in_torch(torch.special.bessel_j1),
        "y0": in_torch(torch.special.bessel_y0), "y1": in_torch(torch.special.bessel_y1),
        "cyl_bessel_i0": in_torch(torch.special.i0), "cyl_bessel_i1": in_torch(torch.special.i1),
        "remainder": lane_by_lane(math.remainder, 2),
        # rounding, parts, classification
        "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint,
        "nearbyint": np.rint, "round": c_round,
        "llrint": to_int(np.rint, np.int64), "llround": to_int(c_round, np.int64),
        "abs": np.abs, "copysign": np.copysign, "nextafter": np.nextafter, "fmod": np.fmod,
        "fdim": fdim, "ldexp": np.ldexp, "scalbn": np.ldexp, "logb": logb, "ilogb": ilogb,
        "saturatef": lambda x: np.where(np.isnan(x), 0, np.clip(x, 0, 1)).astype(x.dtype),
        "isnan": flag(np.isnan), "isinf": flag(np.isinf), "finitef": flag(np.isfinite),
        "isfinited": flag(np.isfinite), "signbit": flag(np.signbit),
        # bits
        "clz": lambda x: 8 * x.dtype.itemsize - bit_length(unsigned(x)),
        "ffs": lambda x: bit_length(unsigned(x) & (~unsigned(x) + np.uint8(1))),
        "popc": popcount, "brev": brev, "mulhi": mulhi, "mul24": mul24,
        "hadd": halving(0), "rhadd": halving(1), "sad": sad, "byte_perm": byte_perm,
        "float_as_int": lambda x: x.view(np.int32), "int_as_float": lambda x: x.view(np.float32),
        "float_as_uint": lambda x: x.view(np.uint32),
        "uint_as_float": lambda x: x.view(np.float32),
        "double_as_longlong": lambda x: x.view(np.int64),
        "longlong_as_double": lambda x: x.view(np.float64),
        "double2loint": lambda x: words(x, 0), "double2hiint": lambda x: words(x, 1),
        "hiloint2double": hilo,
        # conversions exact in any rounding
        "int2double_rn": wide, "uint2double_rn": wide,
        "ll2float_rn": lambda x: x.astype(np.float32), "ull2float_rn": lambda x: x.astype(np.float32),
        "ll2double_rn": wide, "ull2double_rn": wide,
    }  # fmt: skip
    for mode, rounding in rounders.items():
        for src in ("float", "double"):
            for dst, dtype in (("int", np.int32), ("uint", np.uint32), ("ll", np.int64),
                               ("ull", np.uint64)):  # fmt: skip
                table[f"{src}2{dst}_{mode}"] = to_int(rounding, dtype)
        table[f"double2float_{mode}"] = lambda x, m=mode: round_f32(x, 0.0, m)
        table[f"int2float_{mode}"] = lambda x, m=mode: round_f32(wide(x), 0.0, m)
        table[f"uint2float_{mode}"] = lambda x, m=mode: round_f32(wide(x), 0.0, m)
        for op, fn in exact.items():
            table[f"{op}_{mode}"] = float32_only(mode, fn)
    table["fma"] = table["fma_rn"]
    _LIBDEVICE_TABLE.update(table)
    return _LIBDEVICE_TABLE


def _prepare_interpreter() -> None:
    """The repairs above, for a process that runs kernels under the interpreter."""
    _repair_interpreter_index()
    _route_jit_calls()
    _support_libdevice()


def interpreter_on() -> bool:
    """Whether a kernel decorated with ``@triton.jit`` now would run under the interpreter.

    Reads Triton's own knob when ``triton`` is imported (it may have been set from Python,
    ``triton.knobs.runtime.interpret = True``), else the environment variable.
    """
    import sys

    triton = sys.modules.get("triton")
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get(INTERPRET_ENV, "0").strip().lower() in {"1", "true", "on", "yes", "y"}


def use_interpreter() -> None:
    """Turn Triton's interpreter on, for the rest of the process, for kernels decorated from now on.

    Works whether or not ``triton`` was imported before (it imports it): interpreted kernels may
    call ``triton.language``'s helpers even if they were decorated before
    (:func:`_route_jit_calls`), and on triton 3.6 loop bounds read from arguments work
    (:func:`_repair_interpreter_index`). A kernel decorated before this call is still compiled
    for a GPU (see :func:`ensure_interpreted`, :func:`as_interpreted`). Do not call it in a
    process that also runs ``torch.compile`` on a GPU: Inductor's Triton kernels would be
    interpreted too; use :func:`interpreter` there.
    """
    import triton

    os.environ[INTERPRET_ENV] = "1"
    if not interpreter_on():  # triton.knobs.runtime.interpret was set to False from Python
        triton.knobs.runtime.interpret = True
    _prepare_interpreter()


@contextlib.contextmanager
def interpreter() -> Iterator[None]:
    """Kernels decorated inside the block run under the interpreter; the variable (and Triton's
    knob) are as before once it ends. The kernels stay interpreted after it."""
    import triton

    _prepare_interpreter()
    before = os.environ.get(INTERPRET_ENV)
    knob = triton.knobs.runtime.__dict__.get("interpret", _UNSET)
    os.environ[INTERPRET_ENV] = "1"
    triton.knobs.runtime.__dict__.pop("interpret", None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(INTERPRET_ENV, None)
        else:
            os.environ[INTERPRET_ENV] = before
        if knob is not _UNSET:
            triton.knobs.runtime.__dict__["interpret"] = knob


_UNSET = object()


def _jit_function(kernel: Any) -> Any:
    """The ``JITFunction`` or ``InterpretedFunction`` under autotune/heuristics wrappers."""
    seen = 0
    while hasattr(kernel, "fn") and type(kernel).__name__ in {"Autotuner", "Heuristics"}:
        kernel, seen = kernel.fn, seen + 1
        if seen > 10:
            break
    return kernel


def is_interpreted(kernel: Any) -> bool:
    """Whether ``kernel`` (a ``@triton.jit`` function, possibly under ``@triton.autotune`` or
    ``@triton.heuristics``) runs under the interpreter when launched."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_jit_function(kernel), InterpretedFunction)


def ensure_interpreted(kernel: Any) -> None:
    """Raise unless ``kernel`` runs under the interpreter when launched.

    Raises:
        KernelNotInterpreted: the kernel was decorated while the interpreter was off, so it is
            compiled for a GPU; the message says what to do.
        TypeError: ``kernel`` is not a Triton kernel.
    """
    from triton.runtime.jit import JITFunction

    base = _jit_function(kernel)
    if is_interpreted(kernel):
        return
    if not isinstance(base, JITFunction):
        raise TypeError(f"expected a @triton.jit kernel, got {type(kernel).__name__}")
    name = getattr(base, "__name__", "the kernel")
    raise KernelNotInterpreted(
        f"`{name}` was defined while Triton's interpreter was off, so it is compiled for a GPU "
        f"and cannot run on CPU tensors. Turn the interpreter on first "
        f"(grader.runtime.triton_cpu.use_interpreter(), or {INTERPRET_ENV}=1 before Python "
        f"starts), then run the cell that defines `{name}` again: @triton.jit reads "
        f"{INTERPRET_ENV} when it decorates a function, not when triton is imported."
    )


def as_interpreted(kernel: Any) -> Any:
    """``kernel`` itself if it runs under the interpreter, else an interpreted copy of it.

    For a kernel decorated while the interpreter was off (a ``JITFunction``): the copy runs the
    same Python function under the interpreter, on CPU tensors, whatever ``TRITON_INTERPRET``
    says. ``@triton.autotune``/``@triton.heuristics`` wrappers are dropped from the copy: pass
    their meta-parameters (``BLOCK=...``) at launch.

    Raises:
        TypeError: ``kernel`` is not a Triton kernel.
    """
    from triton.runtime.jit import JITFunction

    if is_interpreted(kernel):
        return kernel
    base = _jit_function(kernel)
    if not isinstance(base, JITFunction):
        raise TypeError(f"expected a @triton.jit kernel, got {type(kernel).__name__}")
    _prepare_interpreter()
    return _interpreted_copy(base)


# ---------------------------------------------------------------------------------------------
# Counting


@dataclass
class _Tensor:
    """A tensor argument as the interpreter sees it: its extent in memory, in bytes."""

    name: str
    start: int
    end: int
    nbytes: int
    itemsize: int = 1
    loaded: int = 0
    stored: int = 0
    # Bytes of the extent touched at least once, allocated on first use.
    read_map: Any = None
    write_map: Any = None
    # Which program instances loaded and stored each element (plain accesses), on first use.
    watch: _RaceWatch | None = None

    def elements(self, addresses: Any, size: int) -> Any:
        """The indices (in elements of this tensor, from ``start``) of the elements that
        accesses of ``size`` bytes at ``addresses`` touch."""
        import numpy as np

        offsets = (addresses - np.uint64(self.start)).astype(np.int64)
        first = offsets // self.itemsize
        last = (offsets + (size - 1)) // self.itemsize
        if offsets.size == 0 or np.array_equal(first, last):
            return first
        index = first[:, None] + np.arange(int((last - first).max()) + 1)
        return index[index <= last[:, None]]

    def mark(self, addresses: Any, size: int, which: str) -> None:
        import numpy as np

        attr = "read_map" if which == "load" else "write_map"
        bitmap = getattr(self, attr)
        if bitmap is None:
            bitmap = np.zeros(self.end - self.start, dtype=bool)
            setattr(self, attr, bitmap)
        offsets = (addresses - np.uint64(self.start)).astype(np.int64)
        for b in range(size):
            bitmap[offsets + b] = True


def _tensor_extents(names_and_values: list[tuple[str, Any]]) -> list[_Tensor]:
    """Each tensor argument's byte range; tuple items as ``name[i]``; descriptors by their base."""
    out = []
    for name, value in names_and_values:
        if isinstance(value, tuple):
            out += _tensor_extents([(f"{name}[{i}]", v) for i, v in enumerate(value)])
            continue
        if type(value).__name__ == "TensorDescriptor":
            value = value.base
        value = getattr(value, "base", value) if type(value).__name__ == "TensorWrapper" else value
        if not hasattr(value, "data_ptr") or not hasattr(value, "element_size"):
            continue
        size = value.element_size()
        if value.numel() == 0:
            span = 0
        else:
            span = (sum((s - 1) * st for s, st in zip(value.shape, value.stride())) + 1) * size
        start = value.data_ptr()
        out.append(_Tensor(name, start, start + span, value.numel() * size, size))
    return out


class _RaceWatch:
    """Which program instances of one launch loaded and stored each element of one tensor.

    The interpreter runs the instances one after another, in the order of their linear ids
    (:meth:`_Launch.linear`), so keeping, per element, the lowest instance that stored it (and
    the lowest that loaded it) is enough: another instance than the one accessing it now did so
    exactly when that lowest one is not this one. Loads before the tensor's first store are
    kept as they come (a tensor only read costs a list), and folded in at its first store, or
    once they hold as many lanes as the tensor has elements.
    """

    KINDS = ("write-write", "read-after-write", "write-after-read")
    NONE = 2**31 - 1

    def __init__(self, elements: int) -> None:
        self.size = elements
        self.writers: Any = None
        self.readers: Any = None
        self.pending: list[tuple[int, Any]] = []
        self.pending_lanes = 0
        self.found: dict[str, Any] = {}
        self.examples: dict[str, tuple[int, int, int]] = {}

    def _check(self, kind: str, lowest: Any, pid: int, index: Any) -> Any:
        """Record the elements ``index`` that another instance than ``pid`` accessed (in
        ``lowest``) as the race ``kind``; returns ``lowest[index]``."""
        import numpy as np

        seen = lowest[index]
        other = (seen != pid) & (seen != self.NONE)
        if other.any():
            if kind not in self.found:
                self.found[kind] = np.zeros(self.size, dtype=bool)
                j = int(np.argmax(other))
                self.examples[kind] = (int(seen[j]), pid, int(index[j]))
            self.found[kind][index[other]] = True
        return seen

    @staticmethod
    def _note(lowest: Any, pid: int, index: Any, seen: Any = None) -> None:
        import numpy as np

        lowest[index] = np.minimum(lowest[index] if seen is None else seen, pid)

    def _new(self) -> Any:
        import numpy as np

        return np.full(self.size, self.NONE, dtype=np.int32)

    def _fold(self) -> None:
        if self.readers is None:
            self.readers = self._new()
        for pid, index in self.pending:
            self._note(self.readers, pid, index)
        self.pending, self.pending_lanes = [], 0

    def load(self, pid: int, index: Any) -> None:
        if self.writers is not None:
            self._check("read-after-write", self.writers, pid, index)
        if self.readers is not None:
            self._note(self.readers, pid, index)
            return
        self.pending.append((pid, index))
        self.pending_lanes += index.size
        if self.pending_lanes > self.size:
            self._fold()

    def store(self, pid: int, index: Any) -> None:
        if self.pending:
            self._fold()
        if self.readers is not None:
            self._check("write-after-read", self.readers, pid, index)
        if self.writers is None:
            self.writers = self._new()
        self._note(self.writers, pid, index, self._check("write-write", self.writers, pid, index))


def _element_bytes(ptrs: Any) -> int:
    """Bytes of the element type a block of pointers points to (``int1`` counts as one byte, as
    the interpreter's ``create_addptr`` steps it)."""
    return max(1, ptrs.get_element_ty().primitive_bitwidth // 8)


class _Launch:
    """The counts of one kernel launch while it runs."""

    def __init__(self, kernel: str, tensors: list[_Tensor]) -> None:
        self.kernel = kernel
        self.tensors = tensors
        self.grid: tuple[int, int, int] = (0, 0, 0)
        self.out_of_bounds: list[OutOfBounds] = []
        self.out_of_bounds_lanes = 0
        self.storing: set[tuple[int, ...]] = set()
        # Instances that took a lock (atomic_cas or atomic_xchg): their later plain accesses
        # are taken as synchronized by it and not watched for races.
        self.locked: set[int] = set()

    def linear(self, program_id: Any) -> int:
        """The instance's position in the interpreter's order (``x`` outermost, ``z`` inner)."""
        x, y, z = (int(i) for i in program_id)
        return (x * self.grid[1] + y) * self.grid[2] + z

    def program(self, linear: int) -> tuple[int, int, int]:
        _, ny, nz = self.grid
        return linear // (ny * nz), linear // nz % ny, linear % nz

    def races(self) -> list[Race]:
        out = []
        for t in self.tensors:
            watch = t.watch
            if watch is None:
                continue
            for kind in watch.KINDS:
                if kind in watch.found:
                    first, second, offset = watch.examples[kind]
                    example = (self.program(first), self.program(second), offset)
                    elements = int(watch.found[kind].sum())
                    out.append(Race(self.kernel, t.name, kind, elements, example))
        return out

    def traffic(self) -> Traffic:
        per = {
            t.name: TensorTraffic(
                t.loaded,
                t.stored,
                int(t.read_map.sum()) if t.read_map is not None else 0,
                int(t.write_map.sum()) if t.write_map is not None else 0,
                t.nbytes,
                t.start,
            )
            for t in self.tensors
        }
        return Traffic(
            loads_bytes=sum(t.loaded for t in self.tensors),
            stores_bytes=sum(t.stored for t in self.tensors),
            per_tensor=per,
            out_of_bounds=list(self.out_of_bounds),
            out_of_bounds_lanes=self.out_of_bounds_lanes,
            launches=[(self.kernel, self.grid)],
            storing_programs=len(self.storing),
            races=self.races(),
        )

    def where(self, address: int, home: _Tensor | None, size: int) -> str:
        """Where an out-of-bounds address points, relative to the nearest tensor, in words."""
        inside = [t for t in self.tensors if t.start <= address < t.end]
        candidates = [home] if home is not None else self.tensors
        if not candidates:
            return f"at address {address:#x}, and the kernel was given no tensor"
        near = min(candidates, key=lambda t: min(abs(address - t.start), abs(address - t.end)))
        elements = f"{near.nbytes // size} elements of {size} bytes"
        if address >= near.end:
            k = (address - near.end) // size + 1
            text = f"{k} element(s) past the end of `{near.name}` ({elements})"
        elif address < near.start:
            k = (near.start - address + size - 1) // size
            text = f"{k} element(s) before the start of `{near.name}` ({elements})"
        else:
            text = f"inside `{near.name}` but not aligned with its elements"
        if inside and home is not None and inside[0] is not home:
            text += f", which is inside `{inside[0].name}`"
        return text

    def access(
        self, op: str, ptrs: Any, mask: Any, program_id: Any, lock: bool = False
    ) -> tuple[Any, Any]:
        """Count one load, store or atomic of the pointers ``ptrs`` (a ``TensorHandle`` of
        addresses) under ``mask`` (None: every lane), and watch plain loads and stores for races
        between program instances (``lock``: an atomic that takes a lock). Returns the mask of
        the lanes to perform (active and inside the tensor) and the :class:`OutOfBounds`
        record, or None."""
        import numpy as np

        addresses = np.asarray(ptrs.data).astype(np.uint64, copy=False)
        if mask is None:
            active = np.ones(addresses.shape, dtype=bool)
        else:
            active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        size = _element_bytes(ptrs)
        lanes = addresses[active]
        home, home_in = None, None
        for t in self.tensors:
            inside = (lanes >= np.uint64(t.start)) & (lanes + np.uint64(size) <= np.uint64(t.end))
            if home_in is None or inside.sum() > home_in.sum():
                home, home_in = t, inside
        if home_in is None or not home_in.any():
            home, home_in = None, np.zeros(lanes.shape, dtype=bool)
        ok = np.zeros(addresses.shape, dtype=bool)
        ok[active] = home_in
        n_in = int(home_in.sum())
        if home is not None and n_in:
            if op in ("load", "atomic"):  # an atomic reads and writes each lane
                home.loaded += n_in * size
                home.mark(lanes[home_in], size, "load")
            if op in ("store", "atomic"):
                home.stored += n_in * size
                home.mark(lanes[home_in], size, "store")
                self.storing.add(tuple(int(i) for i in program_id))
            pid = self.linear(program_id)
            if lock:
                self.locked.add(pid)
            elif op != "atomic" and pid not in self.locked:
                if home.watch is None:
                    home.watch = _RaceWatch(-(-(home.end - home.start) // home.itemsize))
                index = home.elements(lanes[home_in], size)
                (home.watch.load if op == "load" else home.watch.store)(pid, index)
        n_out = int(lanes.size - n_in)
        if n_out:
            self.out_of_bounds_lanes += n_out
            first = int(lanes[~home_in].min())
            record = OutOfBounds(
                self.kernel, op, tuple(int(i) for i in program_id), n_out,
                self.where(first, home, size),
            )  # fmt: skip
            if len(self.out_of_bounds) < MAX_OUT_OF_BOUNDS_RECORDS:
                self.out_of_bounds.append(record)
            return ok, record
        return ok, None


class TrafficLog(list):
    """The launches counted by :func:`count_traffic`: one :class:`Traffic` per launch, in order.

    Attributes:
        before: for each launch, in order, the bytes of its CPU tensor arguments as the launch
            found them: ``(start address, bytes of the extent)`` per tensor (see
            :meth:`bytes_before_kernels`).
        after: the same as each launch left them (see :meth:`bytes_after_kernels`).
        undefined_lanes: the masked-off lanes of every ``tl.load`` without ``other``, summed
            over the launches (:func:`_undefined_lanes`).
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.before: list[list[tuple[int, bytes]]] = []
        self.after: list[list[tuple[int, bytes]]] = []
        #: Masked-off lanes of loads without ``other`` (undefined on a GPU; NaN here).
        self.undefined_lanes = 0

    def bytes_before_kernels(self, start: int, end: int) -> list[bytes]:
        """The bytes ``[start, end)`` as each launch whose tensor arguments held them found
        them, in order (a check compares them with an input's: an input changed before a
        kernel read it)."""
        return [
            data[start - lo : end - lo]
            for tensors in self.before
            for lo, data in tensors
            if lo <= start and end <= lo + len(data)
        ]

    def bytes_after_kernels(self, start: int, end: int) -> bytes | None:
        """The bytes ``[start, end)`` as the last launch whose tensor arguments held them left
        them, or None if no launch had them. Compared with the memory after the function
        returned, it tells whether something other than a kernel (a torch operation, a numpy
        view) wrote there after the kernels."""
        for tensors in reversed(self.after):
            for lo, data in tensors:
                if lo <= start and end <= lo + len(data):
                    return data[start - lo : end - lo]
        return None

    def total(self) -> Traffic:
        """All launches added up (:meth:`Traffic.add`); an empty :class:`Traffic` for none."""
        out = Traffic()
        for t in self:
            out = out.add(t)
        return out


_active: list[TrafficLog] = []


@contextlib.contextmanager
def count_traffic(
    *, on_out_of_bounds: str = "record", interpret: bool = True
) -> Iterator[TrafficLog]:
    """Count the memory traffic of every Triton kernel launched inside the block.

    ``with count_traffic() as log: y = student_add(x, w)`` runs the student's code as it is; every
    launch (``kernel[grid](...)``) inside adds a :class:`Traffic` to ``log``, and
    ``log.total()`` adds them up. Pass CPU tensors: the interpreter copies other devices'
    tensors to the CPU and back.

    Args:
        on_out_of_bounds: ``"record"`` (default): an access outside the tensors is recorded in
            :attr:`Traffic.out_of_bounds` and masked off (a load gives ``other`` or 0, a store
            writes nothing), and the kernel goes on; ``"raise"``: the launch stops with
            :class:`OutOfBoundsError`. Either way the memory is never touched.
        interpret: also run kernels compiled for a GPU (decorated while the interpreter was off)
            under the interpreter, inside the block only. With ``False`` such a launch raises
            :class:`KernelNotInterpreted`.

    Yields:
        The :class:`TrafficLog`, filled as the kernels run.

    Raises:
        OutOfBoundsError: with ``on_out_of_bounds="raise"``, at the first access outside.
        KernelNotInterpreted: with ``interpret=False``, for a kernel compiled for a GPU.
        RuntimeError: a ``count_traffic`` block is already active (they do not nest).
        ValueError: ``on_out_of_bounds`` is neither ``"record"`` nor ``"raise"``.
    """
    if on_out_of_bounds not in {"record", "raise"}:
        raise ValueError(f'on_out_of_bounds must be "record" or "raise", not {on_out_of_bounds!r}')
    if _active:
        raise RuntimeError("count_traffic blocks do not nest; one is already counting")
    import numpy as np
    from triton.runtime import interpreter as interp
    from triton.runtime.errors import InterpreterError
    from triton.runtime.jit import JITFunction

    _prepare_interpreter()
    log = TrafficLog()
    builder = interp.interpreter_builder
    executor = interp.GridExecutor
    state: dict[str, _Launch | None] = {"launch": None}
    orig_call, orig_init = executor.__call__, executor._init_args_hst
    orig_jit_run = JITFunction.run
    patched_builder = ["create_masked_load", "create_masked_store", "create_atomic_rmw",
                       "create_atomic_cas", "set_grid_dim"]  # fmt: skip
    saved_builder = {n: builder.__dict__[n] for n in patched_builder if n in builder.__dict__}
    orig = {n: getattr(builder, n) for n in patched_builder}

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        state["launch"] = _Launch(getattr(self.fn, "__name__", "kernel"), [])
        log.before.append(_cpu_bytes([*args, *kwargs.values()]))
        try:
            return orig_call(self, *args, **kwargs)
        except InterpreterError as e:
            if isinstance(e.__cause__, OutOfBoundsError):
                raise e.__cause__ from None
            raise
        finally:
            launch, state["launch"] = state["launch"], None
            log.append(launch.traffic())
            log.after.append(_cpu_bytes([*args, *kwargs.values()]))

    def init_args(self: Any, args_dev: Any, kwargs: Any) -> Any:
        args_hst, kwargs_hst = orig_init(self, args_dev, kwargs)
        named = list(zip(self.arg_names, args_hst)) + list(kwargs_hst.items())
        if state["launch"] is not None:
            state["launch"].tensors = _tensor_extents(named)
        return args_hst, kwargs_hst

    def counted(op: str, ptrs: Any, mask: Any, lock: bool = False) -> Any:
        launch = state["launch"]
        if launch is None:  # a launch that did not go through GridExecutor: nothing to attribute
            return None
        ok, record = launch.access(op, ptrs, mask, builder.grid_idx, lock)
        if record is not None and on_out_of_bounds == "raise":
            raise OutOfBoundsError(record)
        return interp.TensorHandle(ok, interp.tl.int1)

    def masked_load(ptrs, mask, other, cache_modifier, eviction_policy, is_volatile):
        mask = _or(counted("load", ptrs, mask), mask)
        if other is None:
            other = _undefined_lanes(interp, ptrs)
            log.undefined_lanes += int(mask.data.size - np.count_nonzero(mask.data))
        return orig["create_masked_load"](
            ptrs, mask, other, cache_modifier, eviction_policy, is_volatile
        )

    def masked_store(ptrs, value, mask, cache_modifier, eviction_policy):
        mask = _or(counted("store", ptrs, mask), mask)
        return orig["create_masked_store"](ptrs, value, mask, cache_modifier, eviction_policy)

    def atomic_rmw(rmw_op, ptr, val, mask, sem, scope):
        lock = "XCHG" in str(getattr(rmw_op, "name", rmw_op))
        mask = _or(counted("atomic", ptr, mask, lock), mask)
        return orig["create_atomic_rmw"](rmw_op, ptr, val, mask, sem, scope)

    def atomic_cas(ptr, cmp, val, sem, scope):
        launch = state["launch"]
        if launch is not None:
            ok, record = launch.access("atomic", ptr, None, builder.grid_idx, lock=True)
            if record is not None:  # no mask to switch the lanes off: never dereference them
                raise OutOfBoundsError(record)
        return orig["create_atomic_cas"](ptr, cmp, val, sem, scope)

    def set_grid_dim(nx, ny, nz):
        if state["launch"] is not None:
            state["launch"].grid = (int(nx), int(ny), int(nz))
        return orig["set_grid_dim"](nx, ny, nz)

    def jit_run(self: Any, *args: Any, grid: Any, warmup: Any, **kwargs: Any) -> Any:
        if not interpret:
            ensure_interpreted(self)
        return _interpreted_copy(self).run(*args, grid=grid, warmup=warmup, **kwargs)

    _active.append(log)
    try:
        executor.__call__, executor._init_args_hst = call, init_args
        JITFunction.run = jit_run
        builder.create_masked_load = masked_load
        builder.create_masked_store = masked_store
        builder.create_atomic_rmw = atomic_rmw
        builder.create_atomic_cas = atomic_cas
        builder.set_grid_dim = set_grid_dim
        yield log
    finally:
        executor.__call__, executor._init_args_hst = orig_call, orig_init
        JITFunction.run = orig_jit_run
        for n in patched_builder:
            builder.__dict__.pop(n, None)
        builder.__dict__.update(saved_builder)
        _active.pop()


def _undefined_lanes(interp: Any, ptrs: Any) -> Any:
    """What the masked-off lanes of a ``tl.load`` without ``other`` hold while counting: NaN for
    floating-point types, the type's smallest value for integers (booleans: False).

    ``tl.load``'s docstring: "If `other` is `None`, the masked-out value is undefined" (a GPU's
    registers hold whatever they held); the interpreter gives 0 there
    (``InterpreterBuilder.create_masked_load``), which hides a kernel whose result depends on
    those lanes, such as a dot product that multiplies them by zero probabilities (0 x NaN is
    NaN) or a maximum taken over them. NaN makes such a kernel's output show it; a kernel that
    masks those lanes out (``tl.where``, a masked store) is unaffected."""
    import numpy as np

    dtype_tt = ptrs.get_element_ty()
    dtype_np = interp._get_np_dtype(dtype_tt)
    if dtype_tt == interp.tl.bfloat16:  # stored as uint16 there: bfloat16's quiet NaN
        fill: Any = 0x7FC0
    elif dtype_tt.is_floating() and not np.issubdtype(dtype_np, np.floating):
        fill = 0  # float8 (stored as uint8): no NaN taken here
    elif np.issubdtype(dtype_np, np.floating):
        fill = np.nan
    elif np.issubdtype(dtype_np, np.integer):
        fill = np.iinfo(dtype_np).min
    else:
        fill = 0
    return interp.TensorHandle(np.full(ptrs.data.shape, fill, dtype=dtype_np), dtype_tt)


def _cpu_bytes(values: list[Any]) -> list[tuple[int, bytes]]:
    """``(start, bytes of the extent)`` of each CPU tensor in ``values`` (tuples' items and
    descriptors' bases too), read with ``ctypes`` (no torch operation); other devices' tensors
    are left out."""
    import ctypes

    import torch

    flat: list[Any] = []

    def walk(value: Any) -> None:
        if isinstance(value, tuple):
            for v in value:
                walk(v)
            return
        if type(value).__name__ == "TensorDescriptor":
            value = value.base
        if type(value).__name__ == "TensorWrapper":  # triton.reinterpret
            value = getattr(value, "base", value)
        if isinstance(value, torch.Tensor) and value.device.type == "cpu":
            flat.append(value)

    for v in values:
        walk(v)
    out = []
    for t in _tensor_extents([(str(i), v) for i, v in enumerate(flat)]):
        if t.end > t.start:
            out.append((t.start, ctypes.string_at(t.start, t.end - t.start)))
    return out


def _or(mask: Any, fallback: Any) -> Any:
    """``mask`` unless None (a ``TensorHandle``'s truth value is that of all its lanes)."""
    return fallback if mask is None else mask


def run_counted(
    kernel: Any,
    grid: tuple[int, ...] | Callable[[dict], tuple[int, ...]],
    *args: Any,
    **kwargs: Any,
) -> Traffic:
    """Launch ``kernel[grid](*args, **kwargs)`` under the interpreter and return its traffic.

    Args:
        kernel: a ``@triton.jit`` kernel (interpreted or not: see :func:`count_traffic`).
        grid: the launch grid, a tuple of up to three ints or a function of the kernel's
            arguments returning one, as for ``kernel[grid]``.
        *args, **kwargs: the kernel's arguments: CPU tensors, ints, floats, constexprs.

    Returns:
        The launch's :class:`Traffic` (bytes loaded and stored, per tensor, out of bounds).

    Raises:
        As :func:`count_traffic` with its defaults; anything the kernel raises, as the
        interpreter wraps it (``triton.runtime.errors.InterpreterError``).
    """
    with count_traffic() as log:
        kernel[grid](*args, **kwargs)
    return log.total()
