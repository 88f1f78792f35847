"""What crosses from a student's kernel to the grader: plain data, never an object the student wrote.

Under autograde the checks run in the grading process (:mod:`grader.grading.judge`), not in the
student's kernel. The kernel runs the student's functions on the checks' inputs and hands back
what came out; this module turns that into bytes on the kernel's side (:func:`dumps`) and back
into values on the grading side (:func:`loads`). Only plain data crosses:

* ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``;
* ``list``, ``tuple``, ``dict``, ``set`` and ``collections.OrderedDict`` of them;
* ``torch.Tensor`` (and ``nn.Parameter``), ``torch.Size``, ``torch.device``, ``torch.dtype``;

each of exactly that type: an ``int`` subclass, a named tuple, or a mock whose ``__eq__``
always returns True does not cross, so no comparison the grader makes can run the student's
code. One exception, because an exercise that asks for a ``float`` must take every float: an
instance of a ``float`` subclass (NumPy's ``float64`` is one) crosses as the plain ``float`` of
the same value (:func:`plain_floats`, read with ``float.__float__``, never the subclass's own
methods). NumPy's ``float32`` and ``int64`` are no subclasses of ``float`` and ``int``: they do
not cross. The bytes are read with ``torch.load(weights_only=True)`` (PyTorch's unpickler that
rebuilds only allow-listed types) and then checked again, type by type.

An exception raised by the student's code crosses as a description (:func:`describe`: its
class names, message and the traceback as text) and is raised again on the grading side as a
:class:`StudentError` that is also an instance of the nearest built-in exception class
(``ValueError``, ``RuntimeError``, ...), so checks can still ask ``except ValueError``.
"""

from __future__ import annotations

import builtins
import collections
import io
import os
import traceback
from typing import Any

import torch

#: The largest handover, bytes. Checks hand over small results (sums, shapes, a few tensors).
MAX_BYTES = 256 * 2**20
#: How deep containers may nest.
MAX_DEPTH = 64

_SCALARS = (type(None), bool, int, float, complex, str, bytes)
_CONTAINERS = (list, tuple, set, dict, collections.OrderedDict)
_TORCH = (torch.Tensor, torch.nn.Parameter, torch.Size, torch.device, torch.dtype)
_PLAIN = frozenset(_SCALARS + _CONTAINERS + _TORCH)


class NotData(TypeError):
    """A value that cannot be handed to the grader: not plain data (the message says where)."""


def _describe_type(value: Any) -> str:
    kind = type(value)
    name = (
        f"{kind.__module__}.{kind.__qualname__}" if kind.__module__ != "builtins" else kind.__name__
    )
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return f"{name} (a named tuple)"
    for base in (*_SCALARS, *_CONTAINERS, torch.Tensor):
        if isinstance(value, base) and kind is not base:
            return f"{name} (a subclass of {base.__name__})"
    return name


def plain_floats(value: Any, depth: int = 0) -> Any:
    """``value`` with every instance of a ``float`` subclass (``numpy.float64``) replaced by the
    plain ``float`` of the same value, inside lists, tuples, dicts, sets and OrderedDicts of
    exactly those types too (rebuilt); anything else as it is, for :func:`check_data` to judge
    (kernel side). The value is read with ``float.__float__``, so a subclass's own methods never
    run; containers nested deeper than :data:`MAX_DEPTH` are left to :func:`check_data`."""
    kind = type(value)
    if kind is not float and issubclass(kind, float):
        return float.__float__(value)
    if depth > MAX_DEPTH:
        return value
    if kind in (list, tuple):
        return kind(plain_floats(v, depth + 1) for v in value)
    if kind is set:
        return {plain_floats(v, depth + 1) for v in value}
    if kind in (dict, collections.OrderedDict):
        return kind(
            (plain_floats(k, depth + 1), plain_floats(v, depth + 1)) for k, v in value.items()
        )
    return value


def check_data(value: Any, where: str = "the value") -> None:
    """Raise :class:`NotData` unless ``value`` is plain data (see the module docstring).

    Args:
        value: What would be handed over.
        where: How to name ``value`` in the message (``"the value"``, ``"result[2]"``).

    Raises:
        NotData: naming the first part that is not plain data and its type.
    """
    stack = [(value, where, 0)]
    seen = 0
    while stack:
        item, path, depth = stack.pop()
        seen += 1
        if seen > 1_000_000:
            raise NotData(f"{where} is too large to hand over (more than a million parts)")
        if depth > MAX_DEPTH:
            raise NotData(f"{path} nests more than {MAX_DEPTH} containers deep")
        kind = type(item)
        if kind not in _PLAIN:
            raise NotData(
                f"{path} is a {_describe_type(item)}, which the grader does not take: return "
                "plain values (numbers, strings, lists, tuples, dicts, sets, tensors, "
                "torch.device, torch.dtype) rather than other objects (make a list of a generator's "
                "items, convert a NumPy number with float() or int())"
            )
        if kind in (list, tuple):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(item))
        elif kind is set:
            stack.extend((v, f"an element of {path}", depth + 1) for v in item)
        elif kind in (dict, collections.OrderedDict):
            for k, v in item.items():
                stack.append((k, f"a key of {path}", depth + 1))
                stack.append((v, f"{path}[{k!r}]", depth + 1))
        elif isinstance(item, torch.Tensor) and item.layout != torch.strided:
            raise NotData(f"{path} is a {item.layout} tensor; hand over dense tensors")


def dumps(value: Any) -> bytes:
    """Serialize plain data for the grader (kernel side).

    Raises:
        NotData: ``value`` is not plain data, or larger than :data:`MAX_BYTES`.
    """
    check_data(value)
    buffer = io.BytesIO()
    torch.save(value, buffer)
    data = buffer.getvalue()
    if len(data) > MAX_BYTES:
        raise NotData(f"the value is {len(data) / 2**20:.0f} MiB; at most {MAX_BYTES >> 20} MiB")
    return data


def loads(data: bytes) -> Any:
    """Read what :func:`dumps` wrote (grading side), accepting plain data only.

    Raises:
        NotData: the bytes do not hold plain data (or are too large, or corrupt).
    """
    if len(data) > MAX_BYTES:
        raise NotData(f"a handover of {len(data) / 2**20:.0f} MiB; at most {MAX_BYTES >> 20} MiB")
    try:
        value = torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:  # noqa: BLE001 - anything unreadable is refused the same way
        raise NotData(f"the kernel handed over something that is not plain data ({exc})") from None
    check_data(value)
    return value


def roundtrip(value: Any) -> Any:
    """``loads(dumps(value))``: what the grader would receive for ``value``.

    Raises:
        NotData: ``value`` is not plain data.
    """
    return loads(dumps(value))


# --------------------------------------------------------------------------- exceptions
class StudentError(Exception):
    """An exception the student's code raised in its kernel, raised again on the grading side.

    Instances are also instances of the nearest built-in class of the original (see
    :func:`rebuild`). Attributes: ``remote_types`` (qualified class names, most derived
    first), ``remote_message``, ``remote_traceback`` (lines of text, ANSI colours kept).
    """

    remote_types: list[str]
    remote_message: str
    remote_traceback: list[str]


_GRADER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the grader package


def _student_frames(tb):
    """Skip the leading frames of the course's own code, so the traceback starts at the
    student's line."""
    while tb is not None and tb.tb_next is not None:
        filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if not filename.startswith(_GRADER_DIR + os.sep):
            break
        tb = tb.tb_next
    return tb


def format_traceback(exc: BaseException) -> list[str]:
    """The traceback of ``exc`` as lines, from the student's first frame (IPython's colours
    inside a kernel, Python's plain format elsewhere)."""
    tb = _student_frames(exc.__traceback__)
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            return list(shell.InteractiveTB.structured_traceback(type(exc), exc, tb))
    except Exception:  # noqa: BLE001 - fall back to the plain format
        pass
    return traceback.format_exception(type(exc), exc, tb)


def describe(exc: BaseException, *, limit: int = 20_000) -> dict:
    """An exception as plain data (kernel side): class names, message, traceback text."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a student's __str__ may raise
        message = "<the exception's message could not be read>"
    try:
        lines = format_traceback(exc)
    except Exception:  # noqa: BLE001
        lines = []
    text, total = [], 0
    for line in lines:
        total += len(line)
        if total > limit:
            text.append("... (traceback cut)")
            break
        text.append(str(line))
    types = []
    for cls in type(exc).__mro__:
        types.append(f"{cls.__module__}.{cls.__qualname__}")
    return {
        "types": types,
        "message": message[:limit],
        "no_args": not bool(getattr(exc, "args", ())),
        "traceback": text,
    }


#: Built-in exception classes a rebuilt exception may also be an instance of.
_BUILTIN_EXCEPTIONS = {
    f"builtins.{name}": cls
    for name, cls in vars(builtins).items()
    if isinstance(cls, type) and issubclass(cls, BaseException)
}
_REBUILT: dict[type, type] = {}


def rebuild(description: dict) -> BaseException:
    """The exception a :func:`describe` dict stands for, as a :class:`StudentError`.

    A bare ``NotImplementedError()`` (an exercise's unsolved stub) comes back as exactly that,
    so checks recognise it as "not attempted". ``KeyboardInterrupt`` and ``SystemExit`` come
    back as ``RuntimeError``: a student's code cannot stop the grader.
    """
    types = [str(t) for t in description.get("types", [])]
    message = str(description.get("message", ""))
    if types and types[0] == "builtins.NotImplementedError" and description.get("no_args"):
        return NotImplementedError()
    bases = [_BUILTIN_EXCEPTIONS[t] for t in types if t in _BUILTIN_EXCEPTIONS]
    exc = None
    for base in [*bases, Exception]:
        if not issubclass(base, Exception):  # KeyboardInterrupt, SystemExit, GeneratorExit
            base = RuntimeError
        if base not in _REBUILT:
            _REBUILT[base] = type(base.__name__, (StudentError, base), {"__module__": "student"})
        try:
            exc = _REBUILT[base](message)
            break
        except TypeError:  # a class whose constructor needs more arguments (UnicodeDecodeError)
            continue
    short = types[0].rsplit(".", 1)[-1] if types else "Exception"
    exc.remote_types = types
    exc.remote_message = message
    exc.remote_traceback = [str(line) for line in description.get("traceback", [])]
    exc.remote_name = short
    return exc


def exception_name(exc: BaseException) -> str:
    """The class name the student's code raised (``ValueError``), for messages."""
    return getattr(exc, "remote_name", type(exc).__name__)
