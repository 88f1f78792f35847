"""The guard inside grading kernels (grader.grading.guard) and the executor's own defences
(grader.grading.execute): unit tests, fast, without kernels. The guard's audit hook is never installed
in this process (it cannot be removed); its decisions are tested by calling it directly."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import types

import pytest
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode, v4

from grader.grading import execute, guard
from grader.runtime import handover, remote


@pytest.fixture
def guarded(tmp_path):
    """A guard whose student folder, protected folder and log are in tmp_path."""
    student = tmp_path / "student"
    protected = tmp_path / "course"
    lib = tmp_path / "lib"
    for d in (student, protected, lib):
        d.mkdir()
    (protected / "answers.txt").write_text("secret")
    settings = guard.GuardSettings(
        assignment="",
        audit_log=str(tmp_path / "audit.jsonl"),
        blocked=[str(protected)],
        writable=[str(student)],
        protected_writes=[str(tmp_path)],
        student_dirs=[str(student)],
    )
    g = guard._Guard(settings)
    yield types.SimpleNamespace(g=g, student=student, protected=protected, lib=lib, tmp=tmp_path)
    g.log.close()


def _module(folder, name, source):
    """Load ``source`` as a module whose functions live in ``folder/name.py``."""
    path = folder / f"{name}.py"
    path.write_text(source)
    namespace = {"__name__": name}
    exec(compile(source, str(path), "exec"), namespace)  # noqa: S102 - test helper
    return types.SimpleNamespace(**namespace)


def _records(env) -> list[dict]:
    env.g.log.flush()
    return guard.read_log(env.g.log_path)


def test_protected_reads_and_writes_are_blocked_and_recorded(guarded):
    code = _module(
        guarded.student,
        "answer",
        "def read(g, path):\n    g.hook('open', (path, 'r', 0))\n"
        "def write(g, path):\n    g.hook('open', (path, 'w', 0))\n",
    )
    with pytest.raises(PermissionError):
        code.read(guarded.g, str(guarded.protected / "answers.txt"))
    with pytest.raises(PermissionError):
        code.write(guarded.g, str(guarded.tmp / "owned.txt"))
    code.write(guarded.g, str(guarded.student / "mine.txt"))  # its own folder: fine
    kinds = [r["kind"] for r in _records(guarded)]
    assert kinds.count("blocked") == 2


def test_process_memory_and_the_audit_log_are_off_limits(guarded):
    code = _module(
        guarded.student, "mem", "def open_(g, path):\n    g.hook('open', (path, 'r+b', 0))\n"
    )
    for path in ("/proc/self/mem", f"/proc/{os.getpid()}/mem"):
        with pytest.raises(PermissionError, match="process memory"):
            code.open_(guarded.g, path)
    with pytest.raises(PermissionError):
        code.open_(guarded.g, guarded.g.log_path)


def test_dynamic_code_is_recorded_from_the_student_and_through_trampolines_only(guarded):
    lib_bdb = _module(guarded.lib, "bdb", "def run(g):\n    g.hook('exec', ('x = 1',))\n")
    lib_other = _module(guarded.lib, "dataclasses", "def run(g):\n    g.hook('exec', ('x = 1',))\n")
    code = _module(
        guarded.student,
        "cell",
        "def direct(g):\n    g.hook('exec', ('x = 1',))\ndef via(lib, g):\n    lib.run(g)\n",
    )
    code.direct(guarded.g)
    code.via(lib_other, guarded.g)  # a library that makes code (dataclasses, namedtuple): not
    assert [r["kind"] for r in _records(guarded)] == ["dynamic-code"]
    code.via(lib_bdb, guarded.g)  # bdb running a string for the student: recorded
    records = _records(guarded)
    assert len(records) == 2 and "line" in records[1]["where"]


def test_a_thread_started_on_exec_is_recorded(guarded):
    code = _module(
        guarded.student,
        "threads",
        "import threading\n"
        "def start(g):\n    t = threading.Thread(target=exec, args=('1',))\n"
        "    g.hook('_thread.start_new_thread', (t.run, (), {}))\n",
    )
    code.start(guarded.g)
    assert any("a thread running exec" in r["detail"] for r in _records(guarded))


def test_the_snapshot_puts_back_what_a_submission_replaced():
    import grader.runtime.remote as target

    snap = guard._Snapshot()
    original = target.serve
    original_code = target.call.__code__
    try:
        target.serve = lambda *a, **k: None
        target.call.__code__ = (lambda obj: obj).__code__
        changes = snap.restore()
    finally:
        target.serve = original
        target.call.__code__ = original_code
    assert "grader.runtime.remote.serve replaced" in changes
    assert "grader.runtime.remote.call.__code__ swapped" in changes
    assert target.serve is original


def test_student_hooks_and_transformers_are_taken_out_library_ones_kept(guarded, monkeypatch):
    monkeypatch.setattr(guard, "_GUARD", guarded.g)
    code = _module(
        guarded.student,
        "hooks",
        "def transformer(lines):\n    return ['pass\\n']\n"
        "def callback(*a):\n    pass\n"
        "class AstT:\n    def visit(self, node):\n        return node\n",
    )
    library = _module(guarded.lib, "matplotlib_inline", "def flush(*a):\n    pass\n")
    shell = types.SimpleNamespace(
        input_transformers_cleanup=[],
        input_transformers_post=[code.transformer],
        ast_transformers=[code.AstT()],
        events=types.SimpleNamespace(
            callbacks={"pre_run_cell": [library.flush, code.callback], "post_run_cell": []}
        ),
    )
    changes = guard._Snapshot(shell).restore()
    assert shell.input_transformers_post == [] and shell.ast_transformers == []
    assert shell.events.callbacks["pre_run_cell"] == [library.flush]
    assert len([c for c in changes if "IPython" in c]) == 3


def test_the_audit_log_can_be_a_pipe_the_grader_reads(tmp_path):
    fifo = tmp_path / "audit.fifo"
    os.mkfifo(fifo)
    got = []

    def read():
        with open(fifo) as pipe:
            got.extend(pipe.readlines())

    reader = threading.Thread(target=read)
    reader.start()
    log = guard._open_log(str(fifo))
    log.write('{"kind": "installed"}\n')
    log.close()
    reader.join(5)
    assert got == ['{"kind": "installed"}\n']
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


# --------------------------------------------------------------------------- the executor
def _executor(cells, output_bytes=1000):
    ex = execute.CourseExecute(output_bytes=output_bytes)
    nb = v4.new_notebook(cells=cells)
    NotebookClient.__init__(ex, nb)
    ex._output_used, ex._output_told = {}, {}
    ex.clear_before_next_output = False
    return ex, nb


def _message(kind, content, parent="p1"):
    return {
        "msg_type": kind,
        "content": content,
        "parent_header": {"msg_id": parent},
        "header": {"msg_type": kind},
    }


def test_every_kind_of_output_is_capped_per_cell():
    cell = v4.new_code_cell("x")
    ex, _ = _executor([cell])
    for _ in range(5):
        ex.process_message(_message("stream", {"name": "stdout", "text": "a" * 400}), cell, 0)
    ex.process_message(
        _message("display_data", {"data": {"image/png": "A" * 5000}, "metadata": {}}), cell, 0
    )
    text = "".join(o.get("text", "") for o in cell.outputs)
    assert len(text) < 1200 and "output truncated" in text
    assert not any(o.get("output_type") == "display_data" for o in cell.outputs)


def test_grader_replies_only_count_inside_requests():
    cell = v4.new_code_cell("x")
    ex, _ = _executor([cell], output_bytes=0)
    ex.process_message(
        _message("display_data", {"data": {remote.MIME: "Zm9yZ2Vk"}, "metadata": {}}), cell, 0
    )
    assert remote.MIME not in cell.outputs[0]["data"]


def test_display_updates_cannot_reach_test_cells_or_missing_outputs():
    test = v4.new_code_cell("check()")
    test.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "t", "points": 1}
    test.outputs = [
        NotebookNode(output_type="error", ename="CheckFailed", evalue="no", traceback=[])
    ]
    own = v4.new_code_cell("display(x)")
    own.outputs = [
        NotebookNode(output_type="display_data", data={"text/plain": "old"}, metadata={})
    ]
    ex, _ = _executor([test, own], output_bytes=0)
    ex._display_id_map = {"d": {0: [0, 5], 1: [0, 3]}}
    ex._update_display_id(
        "d",
        _message(
            "update_display_data",
            {"data": {"text/plain": "new"}, "metadata": {}, "transient": {"display_id": "d"}},
        ),
    )
    assert test.outputs[0]["ename"] == "CheckFailed" and "data" not in test.outputs[0]
    assert own.outputs[0]["data"] == {"text/plain": "new"}


class _FakeExecutor:
    """Stands in for CourseExecute: answers requests with what ``reply`` makes."""

    def __init__(self, reply):
        self.timeout = 30
        self.reply = reply
        self.nb = v4.new_notebook(cells=[v4.new_code_cell("test")])

    def execute_cell(self, cell, index, store_history=False):
        self.nb.cells[index] = cell  # as nbclient does
        self.reply(cell)


def _channel(reply):
    ex = _FakeExecutor(reply)
    test = ex.nb.cells[0]
    return execute.KernelChannel(ex, test, 0, deadline=1e18), ex, test


def _answer(value):
    def reply(cell):
        nonce = cell.source.split("'")[3]  # the payload
        import base64
        import pickle

        nonce = pickle.loads(base64.b64decode(nonce))[0]
        data = handover.dumps({"ok": True, "value": value})
        cell.outputs = [
            NotebookNode(output_type="stream", name="stdout", text="student print\n"),
            NotebookNode(
                output_type="display_data",
                data={remote.MIME: base64.b64encode(data).decode()},
                metadata={remote.MIME: {"nonce": nonce}},
            ),
        ]

    return reply


def test_the_kernel_channel_reads_plain_data_and_puts_the_cell_back():
    via, ex, test = _channel(_answer([1, 2.5, "x"]))
    handle = remote.Handle("f", via=via)
    assert handle(3) == [1, 2.5, "x"]
    assert ex.nb.cells[0] is test
    assert via.student_outputs()[0]["text"] == "student print\n"


def test_the_kernel_channel_refuses_missing_forged_and_timed_out_replies():
    via, _, _ = _channel(lambda cell: setattr(cell, "outputs", []))
    with pytest.raises(handover.NotData, match="no result"):
        remote.Handle("f", via=via)()

    def forged(cell):
        cell.outputs = [
            NotebookNode(
                output_type="display_data",
                data={remote.MIME: "not base64!!"},
                metadata={remote.MIME: {"nonce": "guessed"}},
            )
        ]

    via, _, _ = _channel(forged)
    with pytest.raises(handover.NotData):
        remote.Handle("f", via=via)()

    def timed_out(cell):
        cell.outputs = [
            NotebookNode(output_type="error", ename="CellTimeoutError", evalue="", traceback=[])
        ]

    via, _, _ = _channel(timed_out)
    with pytest.raises(remote.RequestTimedOut):
        remote.Handle("f", via=via)()

    def dies(cell):
        raise DeadKernelError("gone")

    via, _, _ = _channel(dies)
    with pytest.raises(remote.KernelLost):
        remote.Handle("f", via=via)()


def test_a_request_past_the_deadline_is_not_sent():
    sent = []
    via, _, _ = _channel(lambda cell: sent.append(cell))
    via.deadline = 0
    with pytest.raises(remote.RequestTimedOut):
        remote.Handle("f", via=via)()
    assert not sent


def test_no_event_loop_is_left_running():
    # nbclient's sync wrappers need no running loop in this thread
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()


def test_the_guard_is_installed_even_when_the_gpu_memory_share_cannot_be_set(tmp_path):
    """On a GPU machine install() starts CUDA to cap the kernel's share of GPU memory; if CUDA
    fails there (a busy or broken GPU), the kernel must still run guarded, with a record. In a
    subprocess: an installed audit hook cannot be removed."""
    import json
    import subprocess
    import sys

    settings = guard.GuardSettings(
        assignment="", audit_log=str(tmp_path / "audit.jsonl"), gpu_fraction=0.25
    ).write(tmp_path / "settings.json")
    code = (
        "import torch\n"
        "torch.cuda.is_available = lambda: True\n"
        "torch.cuda.device_count = lambda: 1\n"
        "def refuse(*a): raise RuntimeError('CUDA-capable device(s) is/are busy or unavailable')\n"
        "torch.cuda.set_per_process_memory_fraction = refuse\n"
        "from grader.grading import guard\n"
        f"guard.install({str(settings)!r})\n"
        "print(guard._GUARD is not None)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "True", proc.stderr
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "gpu" and "busy or unavailable" in r["detail"] for r in records)
