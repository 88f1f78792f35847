"""Keep what torch, Kineto and the rank launchers write to stderr out of a test cell's outputs.

Plain nbgrader scores a graded code cell 0 when any of its outputs is an error *or a stream named
stderr* (nbgrader 0.9.6: ``nbgrader/utils.py``, ``determine_grade`` and ``has_failed``). In a
Jupyter kernel, stderr reaches a cell by two roads: Python's ``sys.stderr`` (``print(...,
file=sys.stderr)``, the ``warnings`` module, ``logging`` handlers such as the one torch installs
for its ``W... spawn.py:165] Terminating process ...`` lines) and file descriptor 2, which
ipykernel forwards too (C++: Kineto's ``USDT: ... profiler_start``, c10's logger, and every
child process that inherited it, such as a rank's traceback). One line on either road and a
correct answer loses the cell's points under an nbgrader course configured without the course's
own preprocessors.

:func:`captured_stderr` sends both roads to a temporary file for the duration of a block and gives
back the text: dropped when the block succeeds (or shown as ordinary output, ``show=True``),
shown as ordinary stdout output when it raises, above the exception, because then it may say why
(a rank's traceback). Nothing is ever written to the cell's stderr.

No library is used: ``wurlitzer`` captures file descriptors through pipes and a reader thread,
which loses what a child process writes after the block and leaves Python's warnings and
logging handlers alone; a temporary file and ``os.dup2`` need neither.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
from collections.abc import Iterator

__all__ = ["Captured", "captured_stderr", "drop_torch_notices", "TORCH_NOTICES"]

#: torch's log lines that say nothing a student asked for, by logger: the launcher's "Terminating
#: process N via signal SIGTERM" once a rank failed (the course's launcher,
#: :mod:`grader.runtime.distributed`, says which rank failed and why), and "No CUDA runtime is
#: found, using CUDA_HOME=..." when torch's C++ extension support is imported on a machine that
#: has CUDA's toolkit but no GPU (Inductor imports it: 09's and 12's compile cells).
TORCH_NOTICES = {
    "torch.multiprocessing.spawn": "Terminating process ",
    "torch.utils.cpp_extension": "No CUDA runtime is found",
}


class _DropNotice(logging.Filter):
    """Drops the records of one logger whose message starts with ``prefix``; keeps the rest."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def drop_torch_notices() -> None:
    """Install, once per process, filters that drop the :data:`TORCH_NOTICES` lines (and only
    them) from torch's loggers, so they never reach a notebook's outputs. Called when
    :mod:`grader.runtime` is imported, which every notebook's first cells do."""
    for name, prefix in TORCH_NOTICES.items():
        log = logging.getLogger(name)
        if not any(isinstance(f, _DropNotice) and f.prefix == prefix for f in log.filters):
            log.addFilter(_DropNotice(prefix))


class Captured:
    """What a :func:`captured_stderr` block wrote to stderr; ``text`` is complete after it."""

    def __init__(self) -> None:
        self.text = ""

    def __str__(self) -> str:
        return self.text


def _stderr_handlers(streams: tuple) -> list[logging.StreamHandler]:
    """Every ``logging.StreamHandler`` (files excluded) of every logger that writes to one of
    ``streams`` (torch's own handler holds the ``sys.stderr`` of the moment torch was imported)."""
    loggers = [logging.getLogger()] + [
        lg
        for lg in list(logging.Logger.manager.loggerDict.values())
        if isinstance(lg, logging.Logger)
    ]
    found = []
    for logger in loggers:
        for handler in list(logger.handlers):
            if (
                isinstance(handler, logging.StreamHandler)
                and not isinstance(handler, logging.FileHandler)
                and any(handler.stream is s for s in streams)
            ):
                found.append(handler)
    return found


@contextlib.contextmanager
def captured_stderr(
    *, show: bool = False, show_on_error: bool = True, label: str = ""
) -> Iterator[Captured]:
    """Inside the block, send everything written to stderr to a temporary file: file descriptor
    2 (C and C++ code, child processes started inside the block), ``sys.stderr`` (Python's
    warnings among it) and the logging handlers that write to stderr.

    Args:
        show: Also print the text on stdout when the block succeeds (it is dropped otherwise).
        show_on_error: Print the text on stdout when the block raises (False: drop it then too,
            for diagnostics that the exception itself replaces).
        label: Names what wrote the text when it is printed (``"the rank processes"``).

    Yields:
        A :class:`Captured` whose ``text`` holds what was written, once the block has ended.
        When the block raises, the text (if any) is printed on stdout before the exception goes
        on (unless ``show_on_error`` is False), so that a failure keeps its explanation; the
        exception itself is never swallowed.
    """
    captured = Captured()
    old_stderr = sys.stderr
    for stream in (old_stderr, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    handlers = _stderr_handlers((old_stderr, sys.__stderr__))
    with tempfile.TemporaryFile(mode="w+b", prefix="gpu-course-stderr-") as tmp:
        saved = os.dup(2)
        # A second descriptor on the same open file: Python's writes and C's share its offset,
        # so the text keeps their order.
        text_stream = io.TextIOWrapper(
            open(os.dup(tmp.fileno()), "wb", buffering=0),  # noqa: SIM115 - closed below
            encoding="utf-8",
            errors="replace",
            line_buffering=True,
            write_through=True,
        )
        old_streams = [h.setStream(text_stream) for h in handlers]
        os.dup2(tmp.fileno(), 2)
        sys.stderr = text_stream
        failed = False
        try:
            yield captured
        except BaseException:
            failed = True
            raise
        finally:
            with contextlib.suppress(Exception):
                text_stream.flush()
            sys.stderr = old_stderr
            os.dup2(saved, 2)
            os.close(saved)
            for handler, stream in zip(handlers, old_streams):
                with contextlib.suppress(Exception):
                    handler.setStream(stream)
            text_stream.close()
            tmp.seek(0)
            captured.text = tmp.read().decode("utf-8", "replace")
            if captured.text.strip() and (show_on_error if failed else show):
                who = label or "torch and the processes it started"
                print(f"[what {who} wrote to stderr]\n{captured.text.rstrip()}", flush=True)
