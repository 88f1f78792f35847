"""Where the student's code runs, and how a check reaches it.

A check never touches a student's object directly. It reaches it through a :class:`Handle`::

    pick_device = student(pick_device, "pick_device")
    pick_device("cpu")                    # call it; the result comes back as plain data
    pick_device.probe(_moves, batch)      # run _moves(the student's object, batch) where it lives
    SYNC_POINTS.value()                   # the object itself, as plain data

and runs course code next to the student's code with :func:`run`. A probe (``_moves`` above) is
a module-level function of a ``grader`` module: it sets up what the behaviour under test needs
(a simulated GPU, a recorder of tensor moves), calls the student's object and returns what it
observed as plain data (:mod:`grader.runtime.handover`). The verdict, every comparison and every use of
the reference solution stay with the check.

Where the student's object lives depends on the **channel**:

* **local** (the default): in this process. This is the case in a student's notebook and in the
  course's own tests. Arguments still travel as a pickled copy and results still make the round
  trip through :mod:`grader.runtime.handover`, so an answer the grader could not take fails here too,
  with the same message, and a check that works locally works under autograde.
* **the student's kernel**, under autograde: :mod:`grader.grading.judge` runs the test cells' checks in
  the grading process and gives them handles bound to a channel that sends each request to the
  kernel (:class:`grader.grading.execute.CourseExecute`), where :func:`serve` runs it and displays the
  result as a ``display_data`` output of type :data:`MIME`.

Requests go one way only: the grading side pickles ``(probe, target, args)`` for the kernel (which
trusts the grader); the kernel answers with plain data, which the grading side reads with
:func:`grader.runtime.handover.loads` and nothing else.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import pickle
import secrets
import sys
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from grader.runtime import handover
from grader.runtime.quiet import captured_stderr

#: MIME type of the output through which the kernel answers a request.
MIME = "application/vnd.gpu-course.handover+base64"

_MISSING = object()


class KernelLost(BaseException):  # noqa: N818 - not an Exception: checks must not catch it
    """The student's kernel died or stopped answering during a request. Not a verdict: the
    grader restarts the kernel and scores the cell as one that killed it. A ``BaseException``,
    so that no check's ``except Exception`` swallows it."""


class RequestTimedOut(BaseException):  # noqa: N818 - as KernelLost
    """A request ran past the cell's time limit; the kernel was interrupted (the cell scores 0)."""


class Channel(Protocol):
    """Runs requests where the student's code lives."""

    def request(self, fn: Callable, target: Handle | None, args: tuple, kwargs: dict) -> Any:
        """Run ``fn(target's object, *args, **kwargs)`` (or ``fn(*args, **kwargs)`` without a
        target) there and return the result as plain data, or raise the student's exception
        rebuilt (:func:`grader.runtime.handover.rebuild`)."""


def _require_probe(fn: Callable) -> None:
    """A probe must be a module-level function of a ``grader`` module, so that it travels by
    name (pickled by reference) and the kernel runs the course's own code; one of a checks
    module must be named ``_probe...``, as the kernel's view of the checks keeps only those
    (:mod:`grader.grading.kernel_view`).

    Raises:
        TypeError: ``fn`` is a lambda, a closure, a method or from outside ``grader``.
    """
    module = getattr(fn, "__module__", "") or ""
    qualname = getattr(fn, "__qualname__", "")
    owner = sys.modules.get(module)
    if (
        not (module == "grader" or module.startswith("grader."))
        or "<" in qualname
        or "." in qualname
        or getattr(owner, qualname, None) is not fn
    ):
        raise TypeError(
            f"probe {module}.{qualname} must be a module-level function of a grader module "
            "(it is sent to the student's kernel by name)"
        )
    if module.startswith("grader.checks") and not qualname.startswith("_probe"):
        raise TypeError(
            f"probe {module}.{qualname}: a probe of a checks module must be named _probe... "
            "(the grading kernel sees only those of a checks module: "
            "grader.grading.kernel_view)"
        )


def kernel_side(fn: Callable) -> Callable:
    """Mark a module-level function of a checks module that travels to the student's kernel
    inside a request's arguments (a task handed to the student's ``parallel_map``, a model
    factory), so that the kernel's view of the checks keeps it
    (:mod:`grader.grading.kernel_view`). Probes (``_probe...``) need no mark."""
    fn.__kernel_side__ = True
    return fn


class _RequestPickler(pickle.Pickler):
    """Pickles a request, refusing a function of a checks module that the kernel's view of the
    checks would not hold (neither a probe nor marked :func:`kernel_side`)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type(_require_probe)):
            module = getattr(obj, "__module__", "") or ""
            name = getattr(obj, "__qualname__", "")
            if (
                module.startswith("grader.checks")
                and not name.startswith("_probe")
                and not getattr(obj, "__kernel_side__", False)
            ):
                raise TypeError(
                    f"{module}.{name} is sent to the student's kernel but the kernel's view of "
                    "the checks does not hold it: mark it @grader.runtime.remote.kernel_side"
                )
        return NotImplemented


def _dumps_request(obj: Any) -> bytes:
    """``pickle.dumps(obj)``, through :class:`_RequestPickler`."""
    import io

    out = io.BytesIO()
    _RequestPickler(out).dump(obj)
    return out.getvalue()


def _unpack(reply: Any) -> Any:
    if not isinstance(reply, dict) or "ok" not in reply:
        raise handover.NotData("the kernel's answer is not a reply")
    if reply["ok"] is True:
        return reply.get("value")
    error = reply.get("error")
    if not isinstance(error, dict):
        raise handover.NotData("the kernel's answer holds no error description")
    raise handover.rebuild(error)


def execute(fn: Callable, obj: Any, has_target: bool, args: tuple, kwargs: dict) -> bytes:
    """Run a request here and encode the reply (what :func:`serve` and the local channel do).

    The student's exceptions (and ``SystemExit``) become an error reply; a ``float`` subclass
    (``numpy.float64``) becomes a plain ``float`` (:func:`grader.runtime.handover.plain_floats`);
    a result that is not plain data becomes a :class:`grader.runtime.handover.NotData` error
    reply. ``KeyboardInterrupt``
    (the grader interrupting a cell past its time limit) passes through. What the request writes
    to stderr is printed on stdout instead (:func:`grader.runtime.quiet.captured_stderr`).
    """
    try:
        # What the student's code (or torch, for it) writes to stderr is shown as ordinary
        # output: plain nbgrader scores a test cell with any stderr output 0 (grader.runtime.quiet).
        with captured_stderr(show=True, label="your code"):
            value = fn(obj, *args, **kwargs) if has_target else fn(*args, **kwargs)
        reply: dict = {"ok": True, "value": handover.plain_floats(value)}
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - every error is the reply
        reply = {"ok": False, "error": handover.describe(exc)}
    try:
        return handover.dumps(reply)
    except handover.NotData as exc:
        return handover.dumps({"ok": False, "error": handover.describe(exc)})


class LocalChannel:
    """Runs requests in this process, with the same copies and round trip as the kernel's."""

    def request(self, fn: Callable, target: Handle | None, args: tuple, kwargs: dict) -> Any:
        _require_probe(fn)
        # The kernel receives a pickled copy of the arguments; so does a local probe, so a
        # check cannot come to rely on seeing what the probe did to its arguments.
        fn, args, kwargs = pickle.loads(_dumps_request((fn, args, kwargs)))
        if target is not None and target.obj is _MISSING:
            raise NameError(f"name {target.__name__!r} is not defined")
        obj = target.obj if target is not None else None
        return _unpack(handover.loads(execute(fn, obj, target is not None, args, kwargs)))


LOCAL = LocalChannel()
_CHANNEL: contextvars.ContextVar[Channel] = contextvars.ContextVar("grader_channel", default=LOCAL)


@contextlib.contextmanager
def channel(ch: Channel) -> Iterator[None]:
    """Make :func:`run` and unbound handles use ``ch`` inside the block (the judge's kernel)."""
    token = _CHANNEL.set(ch)
    try:
        yield
    finally:
        _CHANNEL.reset(token)


def current_channel() -> Channel:
    """The channel :func:`run` uses now."""
    return _CHANNEL.get()


class Handle:
    """The student's object as a check sees it: something to call or probe, never to touch.

    Args:
        name: The name of the object in the student's notebook (``"pick_device"``).
        obj: The object itself when it lives in this process (local channel).
        via: The channel to reach it by (default: the local channel when ``obj`` is given,
            else the current channel).
    """

    def __init__(self, name: str, obj: Any = _MISSING, via: Channel | None = None) -> None:
        self.__name__ = name
        self.obj = obj
        self._via = via

    def __repr__(self) -> str:
        return f"<your {self.__name__}>"

    @property
    def via(self) -> Channel:
        """The channel requests go through."""
        if self._via is not None:
            return self._via
        return LOCAL if self.obj is not _MISSING else _CHANNEL.get()

    def probe(self, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(student's object, *args, **kwargs)`` where the object lives.

        Returns:
            ``fn``'s result, as plain data.

        Raises:
            TypeError: ``fn`` is not a module-level function of a grader module.
            grader.runtime.handover.StudentError: ``fn`` raised (usually: the student's code did).
            NotImplementedError: the student's stub is not written yet.
            grader.runtime.handover.NotData: ``fn`` returned something that is not plain data.
        """
        _require_probe(fn)
        return self.via.request(fn, self, args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the student's object with plain-data arguments; return its result as data."""
        return self.probe(call, *args, **kwargs)

    def value(self) -> Any:
        """The student's object itself, as plain data (a dict of answers, a constant)."""
        return self.probe(identity)


def student(obj: Any, name: str) -> Handle:
    """The handle a check works with: ``obj`` itself when it is one already (under autograde),
    else a local handle around the student's object (in the notebook and in tests)."""
    return obj if isinstance(obj, Handle) else Handle(name, obj)


def run(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run the probe ``fn(*args, **kwargs)`` where the student's code runs, return its result as
    data (for course code that needs the student's process but no single object of theirs: a
    script the notebook wrote, the process's CUDA state)."""
    _require_probe(fn)
    return _CHANNEL.get().request(fn, None, args, kwargs)


# --------------------------------------------------------------------------- generic probes
def call(obj: Callable, *args: Any, **kwargs: Any) -> Any:
    """Probe: call the student's object (within :data:`CALL_LIMIT_S`)."""
    with call_time_limit(_called(obj)):
        return obj(*args, **kwargs)


def _called(obj: Any) -> str:
    name = getattr(obj, "__name__", None)
    return f"your {name}" if isinstance(name, str) else "your function"


#: Seconds one call of the student's function may take inside the checks (:func:`attempt`,
#: :func:`call`) before it is stopped with :class:`CallTimedOut`: far above any exercise's
#: reference on a loaded 2-core machine, well below a test cell's 600 s limit
#: (``grader.grading.config.CELL_TIMEOUT_S``), so an answer that never returns fails its check
#: with a message and the cell's other checks still run.
CALL_LIMIT_S = 180.0


class CallTimedOut(TimeoutError):
    """A call of the student's function did not return within :data:`CALL_LIMIT_S`."""


@contextlib.contextmanager
def call_time_limit(what: str, seconds: float | None = None) -> Iterator[None]:
    """Stop the block with :class:`CallTimedOut` (naming ``what``) after ``seconds`` (default
    :data:`CALL_LIMIT_S`), by ``SIGALRM``. Only in the main thread of a process where no other
    interval timer runs (an enclosing limit, or a runner's own ``alarm``, governs then), and only
    where ``signal.setitimer`` exists (not on Windows): elsewhere the block runs unlimited, under
    the cell's time limit."""
    import signal
    import threading

    limit = CALL_LIMIT_S if seconds is None else seconds
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
        or signal.getitimer(signal.ITIMER_REAL)[0] > 0
    ):
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise CallTimedOut(
            f"{what} did not return within {limit:g} s, and the checks stopped it (an endless "
            "loop, or a wait for something that never comes?)"
        )

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def identity(obj: Any) -> Any:
    """Probe: the student's object itself."""
    return obj


def attempt(fn: Callable, *args: Any, **kwargs: Any) -> dict:
    """Call ``fn`` here and record the outcome as plain data (for use inside a probe that
    makes several calls): ``{"ok": True, "value": ...}`` or ``{"ok": False, "error": ...}``.
    A ``float`` subclass (``numpy.float64``) is recorded as a plain ``float``; a result that is
    not plain data is recorded as a :class:`grader.runtime.handover.NotData` error of that call
    alone. The call may take :data:`CALL_LIMIT_S` seconds; past that it is stopped and
    recorded as a :class:`CallTimedOut` error."""
    try:
        with call_time_limit(_called(fn)):
            result = fn(*args, **kwargs)
        value = handover.plain_floats(result)
        handover.check_data(value, "the value it returned")
        return {"ok": True, "value": value}
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the outcome is the record
        return {"ok": False, "error": handover.describe(exc)}


def outcome(record: dict) -> Any:
    """The value an :func:`attempt` record holds, or its exception rebuilt and raised."""
    return _unpack(record)


class Recorded:
    """A stand-in for the student's function that answers from :func:`attempt` records made
    where it lives: call it with the same arguments as a recorded call to get that call's
    value (or exception), so check code written for a function runs on what a probe saw.

    Args:
        name: The student's function's name (for messages).
        calls: ``[(args, kwargs), ...]`` in the order the probe made them.
        records: The probe's :func:`attempt` records, one per call.
    """

    def __init__(self, name: str, calls: list, records: list) -> None:
        self.__name__ = name
        self._answers = [(tuple(a), dict(k), r) for (a, k), r in zip(calls, records)]

    def __repr__(self) -> str:
        return f"<your {self.__name__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for a, k, record in self._answers:
            if a == args and k == kwargs:
                return outcome(record)
        raise LookupError(f"{self.__name__}{args} was not recorded by the probe")


def attempt_all(obj: Callable, calls: list) -> list:
    """Probe: :func:`attempt` each ``(args, kwargs)`` of ``calls`` on the student's object."""
    return [attempt(obj, *args, **kwargs) for args, kwargs in calls]


# --------------------------------------------------------------------------- kernel side
def request_code(fn: Callable, target: str | None, args: tuple, kwargs: dict) -> tuple[str, str]:
    """The code the grading side runs in the kernel for one request, and the request's nonce.

    Raises:
        TypeError: ``fn`` is not a probe (see :func:`_require_probe`).
    """
    _require_probe(fn)
    nonce = secrets.token_hex(8)
    payload = base64.b64encode(_dumps_request((nonce, fn, target, args, kwargs))).decode()
    return f"__import__('grader.runtime.remote').runtime.remote.serve({payload!r})", nonce


def serve(request: str) -> None:
    """Run one request of the grading side in this kernel and display the encoded reply.

    Args:
        request: What :func:`request_code` encoded: nonce, probe, the name of the student's
            object in the notebook (or None), arguments.
    """
    nonce, fn, target, args, kwargs = pickle.loads(base64.b64decode(request))
    obj = None
    if target is not None:
        namespace = _user_namespace()
        if target not in namespace:
            data = handover.dumps(
                {
                    "ok": False,
                    "error": handover.describe(NameError(f"name {target!r} is not defined")),
                }
            )
            _display(nonce, data)
            return
        obj = namespace[target]
    _display(nonce, execute(fn, obj, target is not None, args, kwargs))


def _user_namespace() -> dict:
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            return shell.user_ns
    except ImportError:
        pass
    return vars(sys.modules["__main__"])


def _display(nonce: str, data: bytes) -> None:
    from IPython.display import display

    display(
        {MIME: base64.b64encode(data).decode()},
        raw=True,
        metadata={MIME: {"nonce": nonce}},
    )


def reply_from_outputs(outputs: list, nonce: str) -> Any:
    """The result carried by a request's outputs (grading side).

    Returns:
        The probe's result, as plain data.

    Raises:
        grader.runtime.handover.NotData: no reply, several replies, or a reply that is not plain data.
        grader.runtime.handover.StudentError: the probe raised (rebuilt).
    """
    replies = [
        out
        for out in outputs
        if out.get("output_type") == "display_data"
        and MIME in out.get("data", {})
        and out.get("metadata", {}).get(MIME, {}).get("nonce") == nonce
    ]
    if not replies:
        raise handover.NotData(
            "the kernel handed back no result (did the code replace the display machinery, "
            "or end the kernel?)"
        )
    if len(replies) > 1:
        raise handover.NotData("the kernel handed back several results for one request")
    try:
        data = base64.b64decode(replies[0]["data"][MIME], validate=True)
    except (ValueError, TypeError) as exc:
        raise handover.NotData(f"the kernel's result is not readable ({exc})") from None
    return _unpack(handover.loads(data))
