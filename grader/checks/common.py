"""What every check shares: teaching failure messages, CUDA-only cells, grading mode.

A check is an ordinary function that takes the student's object, runs it on chosen
inputs and raises :class:`CheckFailed` with a message that shows the student's value
beside the expected one and names the likely cause. Test cells in the notebooks are
one line that calls a check, so the logic lives here and is unit-tested in ``tests/``.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from typing import Any

from grader.runtime import course

#: Set to "1" by ``python -m grader autograde`` (and the demo) for the notebook kernels.
#: In grading mode a CUDA-only check on a machine without CUDA raises
#: :class:`NotCheckedWithoutCuda` (the cell scores 0 and the report lists it); in a
#: student's notebook the same check prints that it was not checked and passes.
GRADING_ENV = "GPU_COURSE_AUTOGRADE"

#: Set by nbgrader itself in the environment of every notebook it executes, with any
#: configuration: ``"autograde"`` while autograding, ``"validate"`` while validating
#: (nbgrader 0.9.6: ``nbgrader/converters/autograde.py``, ``nbgrader/validator.py``). An
#: autograde under a course configuration that is not the course's own (an instructor's existing
#: nbgrader course, a JupyterHub's formgrader) is grading mode too.
NBGRADER_EXECUTION_ENV = "NBGRADER_EXECUTION"

#: Grade ids of test cells that need a CUDA GPU end with this suffix (a course fact, defined in
#: :mod:`grader.runtime.course` and re-exported here for the checks).
CUDA_SUFFIX = course.CUDA_SUFFIX


class CheckFailed(AssertionError):
    """A student's answer did not behave as the exercise asks (the message says how).

    In a notebook, IPython shows it as its message alone, not as a traceback through the
    check's own code (``_render_traceback_``, IPython's hook for exceptions that render
    themselves); ``%tb`` prints the full traceback. A failure caused by an exception in the
    student's function shows that exception's traceback (the student's lines) first.
    """

    def _render_traceback_(self) -> list[str]:
        lines: list[str] = []
        cause = self.__cause__
        remote_lines = getattr(cause, "remote_traceback", None)
        if remote_lines:  # raised by the student's code and handed over (grader.runtime.handover)
            lines += list(remote_lines)
            lines.append("\nThat exception, raised by your function, made the check fail:\n")
        elif cause is not None and cause.__traceback__ is not None:
            try:
                from IPython import get_ipython

                shell = get_ipython()
                lines += shell.InteractiveTB.structured_traceback(
                    type(cause), cause, cause.__traceback__
                )
            except Exception:  # noqa: BLE001 - outside IPython: plain Python formatting
                lines += traceback.format_exception(type(cause), cause, cause.__traceback__)
            lines.append("\nThat exception, raised by your function, made the check fail:\n")
        lines.append(f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}")
        lines.append("(the check's message; run %tb to see the check's own code)")
        return lines


class Partial(float):
    """Returned by a check that gives partial credit: the fraction of the cell's points earned
    (0 to 1). Under autograde the cell shows the points as its result, which nbgrader reads as
    partial credit; in a notebook the check prints what was missed."""


class NotAttempted(NotImplementedError):
    """The exercise's function still raises the ``NotImplementedError()`` of its stub.

    Shown in a notebook as its one-line message, not as a traceback through the check.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;33m{type(self).__name__}\x1b[0m: {self}"]


class NotCheckedWithoutCuda(RuntimeError):
    """Raised in grading mode by a CUDA-only check when the grading machine has no GPU."""


def grading_mode() -> bool:
    """Return True when the code runs under an autograde: the course's command (which sets
    :data:`GRADING_ENV`) or nbgrader's own ``autograde`` with any configuration (which sets
    ``NBGRADER_EXECUTION=autograde``). A student's run and nbgrader's ``validate`` are not."""
    return (
        os.environ.get(GRADING_ENV) == "1" or os.environ.get(NBGRADER_EXECUTION_ENV) == "autograde"
    )


def cuda_or_not_checked(what: str) -> bool:
    """Decide whether a CUDA-only check can run here.

    Args:
        what: What the check would verify, e.g. ``"time_gpu with CUDA events"``.

    Returns:
        True when a CUDA GPU is available. Without one, in a student's notebook it
        prints a "NOT CHECKED" notice and returns False (the cell passes).

    Raises:
        NotCheckedWithoutCuda: without a GPU in grading mode, so the cell scores 0
            and the grading report names it as not checked.
    """
    import torch  # here: the grading process imports this module without needing torch

    if torch.cuda.is_available():
        return True
    if grading_mode():
        raise NotCheckedWithoutCuda(
            f"NOT CHECKED: {what} needs a CUDA GPU and this grading machine has none, "
            "so this cell scores 0. Grade on a GPU machine to award these points."
        )
    print(
        f"NOT CHECKED here: {what} needs a CUDA GPU, and this machine has none. "
        "This cell passes without one; your instructor grades it on a GPU."
    )
    return False


def fail(what: str, *, yours: Any, expected: Any, cause: str) -> None:
    """Raise a :class:`CheckFailed` laid out as What / Yours / Expected / Likely cause.

    Raises:
        CheckFailed: always.
    """
    raise CheckFailed(
        f"{what}\n  Yours    : {yours!r}\n  Expected : {expected!r}\n  Likely cause: {cause}"
    )


def require(condition: bool, what: str, *, yours: Any, expected: Any, cause: str) -> None:
    """Call :func:`fail` unless ``condition`` holds."""
    if not condition:
        fail(what, yours=yours, expected=expected, cause=cause)


def _exception_line(exc: BaseException) -> str:
    """``ValueError: message`` for an exception of the student's (rebuilt ones included)."""
    from grader.runtime.handover import exception_name

    text = str(exc)
    return f"{exception_name(exc)}: {text}" if text else exception_name(exc)


def _handover_refused(exc: BaseException) -> bool:
    """True when ``exc`` says a result was not plain data (grader.runtime.handover.NotData)."""
    types = getattr(exc, "remote_types", None) or [
        f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__
    ]
    return "grader.runtime.handover.NotData" in types


def not_attempted(label: str) -> NotAttempted:
    """The failure for an exercise whose stub is still there."""
    return NotAttempted(
        f"exercise not attempted yet: {label} still raises the NotImplementedError of its "
        "stub. Write it in the exercise cell, run that cell, then run this test cell again."
    )


def call_student(fn: Callable, *args: Any, name: str | None = None, **kwargs: Any) -> Any:
    """Call the student's function, turning an unexpected exception into a clear failure.

    ``fn`` is usually a :class:`grader.runtime.remote.Handle` (the call then runs where the student's
    code lives and the result comes back as plain data); a plain callable is called here.

    Raises:
        NotAttempted: the function still raises its stub's bare ``NotImplementedError()``.
        CheckFailed: the function raised anything else (a ``NotImplementedError`` with a
            message, raised by torch, included).
    """
    label = name or getattr(fn, "__name__", "your function")
    try:
        return fn(*args, **kwargs)
    except NotAttempted:
        raise
    except NotImplementedError as exc:
        if not exc.args:
            raise not_attempted(label) from None
        raise CheckFailed(f"{label}(...) raised {_exception_line(exc)}") from exc
    except CheckFailed:
        raise
    except Exception as exc:  # noqa: BLE001 - every student error becomes a message
        shown = ", ".join(
            [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
        )
        call = label if label.endswith(")") else f"{label}({shown})"
        if _handover_refused(exc):
            raise CheckFailed(f"{call}: {exc}") from None
        raise CheckFailed(
            f"{call} raised {_exception_line(exc)}\n"
            "  Read the traceback above this message to see which line of yours raised it."
        ) from exc


def expect_raises(
    exc_type: type[BaseException], fn: Callable, *args: Any, what: str, cause: str, **kwargs: Any
) -> BaseException:
    """Call ``fn`` and require that it raises ``exc_type``; return the exception.

    Raises:
        CheckFailed: ``fn`` returned normally or raised another type.
    """
    try:
        value = fn(*args, **kwargs)
    except exc_type as exc:
        return exc
    except NotAttempted:
        raise
    except NotImplementedError as exc:
        if not exc.args:  # the unsolved exercise's stub
            raise not_attempted(getattr(fn, "__name__", "your function")) from None
        fail(
            what,
            yours=f"raised NotImplementedError: {exc}",
            expected=f"raises {exc_type.__name__}",
            cause=cause,
        )
    except Exception as exc:  # noqa: BLE001
        fail(
            what,
            yours=f"raised {_exception_line(exc)}",
            expected=f"raises {exc_type.__name__}",
            cause=cause,
        )
    fail(what, yours=f"returned {value!r}", expected=f"raises {exc_type.__name__}", cause=cause)
    raise AssertionError("unreachable")


def passed(message: str) -> None:
    """Print a one-line success note for the student."""
    print(f"OK: {message}")


def _short(value: Any, limit: int = 60) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
