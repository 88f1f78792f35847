"""grader.runtime.quiet: stderr from C, child processes, warnings and logging kept out of a cell."""

import logging
import os
import subprocess
import sys
import warnings

import pytest

from grader.runtime.quiet import captured_stderr


def _print_warning(message, category, filename, lineno, file=None, line=None):
    """What ``warnings.showwarning`` does outside pytest: print on the ``sys.stderr`` of the
    moment."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def test_every_road_to_stderr_is_captured_and_dropped(capfd):
    logger = logging.getLogger("gpu-course-test-quiet")
    handler = logging.StreamHandler(sys.stderr)  # holds the stream of its creation, as torch's
    logger.addHandler(handler)
    try:
        with captured_stderr() as out:
            os.write(2, b"USDT: profiler_start\n")  # as C++ writes
            print("from Python", file=sys.stderr)
            with warnings.catch_warnings():  # pytest records warnings; a kernel prints them
                warnings.simplefilter("always")
                warnings.showwarning = _print_warning
                warnings.warn("a RuntimeWarning", RuntimeWarning, stacklevel=1)
            logger.warning("W spawn.py:165] Terminating process 1 via signal SIGTERM")
            subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('a rank\\n')"])
    finally:
        logger.removeHandler(handler)
    err = capfd.readouterr()
    assert err.err == "" and err.out == ""
    for line in ("USDT: profiler_start", "from Python", "a RuntimeWarning", "SIGTERM", "a rank"):
        assert line in out.text
    assert out.text.index("USDT") < out.text.index("from Python") < out.text.index("a rank")
    assert handler.stream is sys.stderr  # given back
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_a_failure_shows_what_was_written_on_stdout_and_raises(capfd):
    with pytest.raises(ValueError, match="rank 1 failed"), captured_stderr(label="the ranks"):
        os.write(2, b"Traceback: rank 1\n")
        raise ValueError("rank 1 failed")
    out = capfd.readouterr()
    assert out.err == ""
    assert "[what the ranks wrote to stderr]\nTraceback: rank 1" in out.out


def test_show_prints_on_stdout_and_nested_blocks_restore_their_own(capfd):
    with captured_stderr(show=True) as outer:
        with captured_stderr() as inner:
            os.write(2, b"inner\n")
        os.write(2, b"outer\n")
    out = capfd.readouterr()
    assert inner.text == "inner\n" and outer.text == "outer\n"
    assert out.err == "" and "outer" in out.out and "inner" not in out.out


def test_show_on_error_false_drops_the_text_of_a_failure(capfd):
    with pytest.raises(RuntimeError), captured_stderr(show_on_error=False) as out:
        os.write(2, b"partial graph\n")
        raise RuntimeError("export failed")
    assert out.text == "partial graph\n" and capfd.readouterr() == ("", "")


def test_nbgraders_gradebook_warnings_are_dropped_and_no_others(tmp_path):
    """Adding a submission to nbgrader's gradebook makes SQLAlchemy warn three times ("Object of
    type <SubmittedAssignment> not in session, ..."); the course's commands drop exactly those
    lines (grader/grading/config.py, at its import), and another warning from nbgrader's module
    still shows."""
    import warnings

    from nbgrader.api import Gradebook

    from grader.grading import grading
    from grader.grading.config import GRADEBOOK_WARNINGS

    db = grading._template_gradebooks(["01_devices"], tmp_path)["01_devices"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        warnings.filterwarnings("ignore", **GRADEBOOK_WARNINGS)  # as config.py does
        with Gradebook(f"sqlite:///{db}", "gpu-parallel-pytorch") as gb:
            gb.update_or_create_student("alice")
            gb.update_or_create_submission("01_devices", "alice")
        warnings.warn_explicit("another warning", UserWarning, "api.py", 1, module="nbgrader.api")
    assert [str(w.message) for w in caught] == ["another warning"]


def test_torchs_notices_are_dropped_and_its_other_lines_kept():
    """The launcher's "Terminating process ..." and cpp_extension's "No CUDA runtime is found"
    never reach a notebook (grader.runtime installs the filters on import); another line of
    the same loggers still does."""
    import grader.runtime  # noqa: F401 - installs the filters
    from grader.runtime.quiet import TORCH_NOTICES

    for name, prefix in TORCH_NOTICES.items():
        log = logging.getLogger(name)
        dropped = log.makeRecord(name, logging.WARNING, "x.py", 1, prefix + "%s", ("123",), None)
        kept = log.makeRecord(name, logging.WARNING, "x.py", 1, "something else", (), None)
        assert not log.filter(dropped), name
        assert log.filter(kept), name
