"""nbgrader's Execute preprocessor, made to survive what a submission can do to its kernel.

nbgrader gives up on a whole submission when its kernel dies, and waits ``timeout`` seconds
for every later cell when a runaway cell ignores the interrupt. :class:`CourseExecute` keeps
nbgrader's behaviour for ordinary cells (an error or a timeout scores that cell 0) and adds:

* **kernel death** (``os._exit``, a segfault, the memory limit): the cell that was running
  gets an error output that says so; a fresh kernel re-runs the earlier non-test cells (so the
  student's other functions exist again) and grading goes on with the next cell. After
  :attr:`CourseExecute.max_restarts` deaths the remaining cells get "not run" errors;
* **a cell that does not stop when interrupted** after its timeout: the kernel is killed and
  treated as above;
* **a deadline for the whole notebook** (:attr:`CourseExecute.notebook_timeout`): cells not
  reached by then get "not run" errors;
* **unchanged teaching demos are not re-run** (:attr:`CourseExecute.skip_sources`: the
  sources of the source notebook's ``demo``-tagged cells, which define nothing later cells
  read); a cell is skipped only when its text equals one of them exactly, so nothing a student
  wrote is ever skipped, and its output says so;
* **a memory watchdog** (:attr:`CourseExecute.memory_bytes`): the kernel's process tree is
  killed when its resident memory exceeds the limit (on the CPU the sandbox's address-space
  limit usually turns a runaway allocation into a ``MemoryError`` first);
* **a disk watchdog** (:attr:`CourseExecute.disk_bytes`): the kernel's process tree is killed
  when what it has written (its folders, :attr:`CourseExecute.disk_paths`, and the sandbox's
  private ``/tmp`` and ``/dev/shm``: :mod:`grader.grading.quota`) grows past the quota, or
  past :attr:`CourseExecute.disk_entries` files; what it added to the notebook's folder is
  removed, so the next kernel starts within the quota;
* **test cells judged in the grading process** (:attr:`CourseExecute.judge_tests`, on by
  default): a test cell is not run in the student's kernel; :func:`grader.grading.judge.judge_cell`
  runs its checks here and reaches the student's functions through :class:`KernelChannel`,
  which runs each request in the kernel as a hidden execution and reads back plain data. The
  cell's outputs are the judge's (nbgrader scores them as usual). A request is bounded by the
  cell's time limit; a kernel that dies or hangs during one is handled as above;
* **the GPU to itself** for ``_cuda`` test cells (:attr:`CourseExecute.gpu_lock`, see
  :class:`GpuTurn`): a ``_cuda`` cell holds the machine's GPU lock exclusively and every other
  cell holds it shared, so a timing check never competes with a neighbour's cells while ordinary
  cells of different jobs still run side by side; the time spent waiting for a turn counts
  against neither the cell's nor the notebook's time limit;
* **a cap on every cell's outputs** (:attr:`CourseExecute.output_bytes`), whatever their kind
  (printed text, ``display_data``, images): past the cap, outputs are dropped and a note says
  so; display updates cannot reach test cells.

Every cell that did not run to completion ends with an error output, so nbgrader scores it 0
(an unexecuted grade cell without an error would otherwise get full marks). The reasons are
kept in ``resources["course_events"]`` for the grading report.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import threading
import time

import nbformat
import psutil
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Enum, Integer, List, Unicode

from grader.checks.common import CUDA_SUFFIX
from grader.grading import judge, quota, report
from grader.grading.sandbox import SandboxKernelManager
from grader.runtime import remote


def kill_processes(procs: list[psutil.Process], wait_s: float = 0.0) -> None:
    """Kill ``procs`` in the order given (children before parents), skipping any already
    gone, then wait up to ``wait_s`` seconds for them to end."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if wait_s:
        psutil.wait_procs(procs, timeout=wait_s)


def _unique_memory(proc: psutil.Process) -> int:
    """A process's resident memory, bytes, counting pages it shares with others (a DataLoader
    worker forked from the kernel) in proportion (PSS); its RSS where PSS cannot be read."""
    try:
        return proc.memory_full_info().pss
    except (psutil.AccessDenied, AttributeError):
        return proc.memory_info().rss


class KernelStuck(RuntimeError):
    """The kernel did not stop after an interrupt: it is killed and restarted."""


class GpuBusy(RuntimeError):
    """A cell waited :attr:`CourseExecute.gpu_lock_timeout` seconds for its turn on the GPU
    without getting it: the cell is not run (a test cell scores 0), with this message."""


#: File descriptors of the GPU turns this process holds. A process forked while one is held
#: (a DataLoader worker, a rank forked by a check) would share the lock and keep it after the
#: turn ends, so a forked child closes its copies at once (the parent's lock stays).
_HELD_FDS: set[int] = set()


def _close_held_fds_in_child() -> None:
    for fd in list(_HELD_FDS):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD_FDS.clear()


os.register_at_fork(after_in_child=_close_held_fds_in_child)


class GpuTurn:
    """A cell's turn on the GPU that the grading jobs of one machine share (``flock(2)``).

    A ``_cuda`` test cell holds ``path`` **exclusively**: no other job's cell runs while its
    timings are taken. Every other cell holds it **shared**, so cells of different jobs run
    side by side as before and only wait while a ``_cuda`` cell runs. A turnstile
    (``path + ".gate"``), held by a cell while it waits for its hold, makes later cells queue
    behind a waiting ``_cuda`` cell, which therefore never starves behind a stream of
    ordinary cells. Use as a context manager; :attr:`waited` is the seconds spent waiting.

    Raises:
        GpuBusy: on entry, when the turn did not come within ``timeout`` seconds.
    """

    def __init__(self, path: str, *, exclusive: bool, timeout: float):
        self.path, self.exclusive, self.timeout = path, exclusive, timeout
        self.waited = 0.0
        self._fds: list[int] = []

    def _take(self, fd: int, how: int, deadline: float) -> None:
        import fcntl

        while True:
            try:
                fcntl.flock(fd, how | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise GpuBusy(
                        "NOT RUN: the GPU stayed busy with other submissions' CUDA cells for "
                        "longer than this notebook may wait, so this cell did not get its turn "
                        "(a test cell scores 0) and the cells after it were not run. Grade this "
                        "submission again (--regrade) when the machine is less loaded."
                    ) from None
                time.sleep(0.05)

    def _open(self, path: str) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited across exec
        self._fds.append(fd)
        _HELD_FDS.add(fd)
        return fd

    def __enter__(self) -> GpuTurn:
        import fcntl

        asked = time.monotonic()
        deadline = asked + self.timeout
        try:
            gate, hold = self._open(self.path + ".gate"), self._open(self.path)
            self._take(gate, fcntl.LOCK_EX, deadline)
            try:
                self._take(hold, fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH, deadline)
            finally:
                fcntl.flock(gate, fcntl.LOCK_UN)
        except BaseException:
            self._close()
            raise
        finally:
            self.waited = time.monotonic() - asked
        return self

    def __exit__(self, *exc) -> None:
        self._close()

    def _close(self) -> None:
        for fd in self._fds:  # closing releases the flock
            _HELD_FDS.discard(fd)
            os.close(fd)
        self._fds = []


class CourseExecute(Execute):
    """nbgrader's Execute with crash recovery, a notebook deadline and a memory watchdog."""

    max_restarts = Integer(3, help="Kernel deaths tolerated before giving up").tag(config=True)
    notebook_timeout = Integer(1800, help="Seconds for the whole notebook").tag(config=True)
    memory_bytes = Integer(0, help="Kill the kernel above this resident memory (0: off)").tag(
        config=True
    )

    skip_sources = List(
        Unicode(), help="Exact sources of unchanged demo cells not to re-run under autograde"
    ).tag(config=True)
    judge_tests = Bool(
        True,
        help="Run test cells' checks in the grading process (grader.grading.judge), not the kernel",
    ).tag(config=True)
    judge_only = Unicode(
        "", help='Judge only these test cells: "cuda", "no-cuda" or "" (all); the rest are deferred'
    ).tag(config=True)
    gpu_lock = Unicode(
        "", help="Lock file held while a _cuda test cell is judged (empty: no lock)"
    ).tag(config=True)
    gpu_lock_timeout = Integer(
        3600, help="Seconds a notebook may wait for its turns on the GPU, in all"
    ).tag(config=True)
    output_bytes = Integer(
        2 * 1024**2, help="Outputs kept per cell, bytes (0: no cap); the rest is dropped"
    ).tag(config=True)
    iopub_timeout = Integer(
        300,
        help="Seconds to wait, once a cell has replied, for the rest of its outputs: a flood "
        "is read within its own cell's turn, never in the next cell's (nbclient's default: 4)",
    ).tag(config=True)
    disk_bytes = Integer(
        0, help="Kill the kernel when it has written more than this, bytes (0: off)"
    ).tag(config=True)
    disk_paths = List(
        Unicode(), help="The kernel's writable folders, measured against disk_bytes"
    ).tag(config=True)
    executed_log = Unicode(
        "", help="JSON file to write the ids of the executions that completed to (the audit check)"
    ).tag(config=True)
    disk_entries = Integer(
        200_000, help="Kill the kernel when it has made more files than this (with disk_bytes)"
    ).tag(config=True)

    shutdown_kernel = Enum(
        ["graceful", "immediate"],
        default_value="immediate",
        help="How a kernel is stopped once its notebook is done: killed at once (nbclient's "
        "default, graceful, asks it to stop and waits about a second for it to; nothing the "
        "grading reads comes from a kernel's exit)",
    ).tag(config=True)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", SandboxKernelManager)
        super().__init__(*args, **kwargs)

    # ------------------------------------------------------------------ what went wrong
    def _kernel_exit(self) -> str:
        """How the kernel process ended, in words (best effort)."""
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        if process is None:
            return "the kernel died"
        try:
            code = process.wait(timeout=5)
        except Exception:  # noqa: BLE001 - still running, or already reaped
            code = process.returncode
        if self._killed_for_memory.is_set():
            return (
                f"ran out of its memory limit ({self.memory_bytes / 1e9:g} GB): the kernel used "
                "more and was stopped"
            )
        if self._killed_for_disk:
            return self._killed_for_disk
        if code is None:
            return "the kernel stopped responding and was killed"
        if code > 128 and code - 128 in {s.value for s in signal.Signals}:
            code = -(code - 128)  # a shell or bubblewrap reports "killed by signal N" as 128 + N
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            meaning = {"SIGSEGV": "a segmentation fault", "SIGKILL": "killed (out of memory?)",
                       "SIGABRT": "an abort", "SIGBUS": "a bus error"}.get(name, name)  # fmt: skip
            return f"the kernel died with {meaning} ({name})"
        return f"the kernel exited with status {code} (os._exit or sys.exit in the code?)"

    def _error(self, cell: NotebookNode, ename: str, message: str) -> None:
        cell.outputs.append(
            NotebookNode(
                output_type="error",
                ename=ename,
                evalue=message,
                traceback=[f"\x1b[0;31m{ename}\x1b[0m: {message}"],
            )
        )
        self.resources.setdefault("course_events", []).append(
            {
                "cell": cell.get("id"),
                "grade_id": cell.metadata.get("nbgrader", {}).get("grade_id"),
                "error": ename,
                "message": message,
            }  # fmt: skip
        )

    def _skip(self, cell: NotebookNode) -> bool:
        """Replace an unchanged demo cell's outputs with a note instead of running it."""
        meta = cell.metadata.get("nbgrader", {})
        if (
            cell.cell_type != "code"
            or meta.get("grade")
            or meta.get("solution")
            or cell.source not in self._skip_set
        ):
            return False
        cell.outputs = [
            NotebookNode(
                output_type="stream",
                name="stdout",
                text="[autograde] teaching demo, unchanged: not re-run while grading.\n",
            )
        ]
        return True

    def _not_run(self, start: int, why: str) -> None:
        for cell in self.nb.cells[start:]:
            if cell.cell_type == "code":
                cell.outputs = []
                self._error(cell, "NotRun", f"not run: {why}")

    # ------------------------------------------------------------------ outputs
    @staticmethod
    def _size(content: dict) -> int:
        """Roughly how many bytes a message's output content holds."""
        total = len(content.get("text", "") or "")
        for value in (content.get("data") or {}).values():
            total += len(value) if isinstance(value, (str, bytes)) else len(str(value))
        return total

    def process_message(self, msg, cell, cell_index):
        """nbclient's handling, with the per-cell output cap, and nothing a request or a
        student's display update can do to a judged test cell."""
        content = msg.get("content") or {}
        msg_type = msg.get("msg_type")
        if msg_type == "status" and content.get("execution_state") == "idle":
            self._executed.append(str((msg.get("parent_header") or {}).get("msg_id")))
        if msg_type in ("stream", "display_data", "execute_result", "update_display_data"):
            request = cell.metadata.get("grader_request")
            if request:
                # A request's own reply is read by KernelChannel and never kept in the notebook.
                content.pop("transient", None)
                if MIME_REPLY in (content.get("data") or {}):
                    return super().process_message(msg, cell, cell_index)
            elif msg_type in ("display_data", "execute_result") and MIME_REPLY in (
                content.get("data") or {}
            ):
                content["data"] = {"text/plain": "[a grader reply outside a grader request]"}
            if self.output_bytes:
                used = self._output_used.get(id(cell), 0)
                size = self._size(content)
                if used + size > self.output_bytes:
                    if msg_type == "update_display_data":
                        return None
                    if not self._output_told.get(id(cell)):
                        self._output_told[id(cell)] = True
                        cell.outputs.append(
                            NotebookNode(
                                output_type="stream",
                                name="stdout",
                                text=f"\n[output truncated by the course's grader after "
                                f"{self.output_bytes // 1024} KiB]\n",
                            )
                        )
                    if msg_type in ("stream", "display_data", "execute_result"):
                        return None
                self._output_used[id(cell)] = used + size
        return super().process_message(msg, cell, cell_index)

    def _update_display_id(self, display_id, msg):
        """nbclient's display update, limited to display outputs of cells that are not tests
        (an update aimed at a replaced output would otherwise fail the whole notebook)."""
        targets = self._display_id_map.get(display_id, {})
        for cell_idx in list(targets):
            cell = self.nb.cells[cell_idx]
            meta = cell.metadata.get("nbgrader", {})
            keep = [
                i
                for i in targets[cell_idx]
                if i < len(cell.outputs)
                and cell.outputs[i].get("output_type") in ("display_data", "execute_result")
                and not (meta.get("grade") and not meta.get("solution"))
            ]
            targets[cell_idx] = keep
        return super()._update_display_id(display_id, msg)

    # ------------------------------------------------------------------ judged test cells
    @staticmethod
    def _is_test_cell(cell: NotebookNode) -> bool:
        meta = cell.metadata.get("nbgrader", {})
        return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")

    @contextlib.contextmanager
    def _gpu_turn(self, cell: NotebookNode):
        """Wait for the cell's turn on the GPU (see :class:`GpuTurn`) and hold it.

        Only code cells take a turn, and only where :attr:`gpu_lock` is set (a machine with a
        GPU). The time waited is added to the notebook's wait account, which moves its
        deadline (:meth:`_deadline`); a notebook waits at most :attr:`gpu_lock_timeout`
        seconds in all.

        Raises:
            GpuBusy: the turn did not come within what is left of the wait account.
        """
        if not self.gpu_lock or cell.cell_type != "code":
            yield
            return
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        turn = GpuTurn(
            self.gpu_lock,
            exclusive=self._is_test_cell(cell) and grade_id.endswith(CUDA_SUFFIX),
            timeout=max(0.0, self.gpu_lock_timeout - self._waited),
        )
        try:
            turn.__enter__()
        finally:
            self._waited += turn.waited
        try:
            yield
        finally:
            turn.__exit__(None, None, None)

    def _deadline(self) -> float:
        """The notebook's deadline: its start plus :attr:`notebook_timeout` plus every second
        it waited for the GPU (waiting for other students' cells is no fault of its own)."""
        return self._started + self.notebook_timeout + self._waited

    def _deferred(self, cell: NotebookNode) -> bool:
        """Leave a test cell outside :attr:`judge_only` to another machine (score 0 here,
        named *Deferred*; ``python -m grader merge`` takes its score from where it was graded)."""
        if not self.judge_only or not self._is_test_cell(cell):
            return False
        cuda = cell.metadata.get("nbgrader", {}).get("grade_id", "").endswith(CUDA_SUFFIX)
        if cuda == (self.judge_only == "cuda"):
            return False
        where = "a GPU machine" if cuda else "a machine grading the CPU checks"
        cell.outputs = [
            NotebookNode(
                output_type="error",
                ename="Deferred",
                evalue=f"graded on {where} (--{'no-cuda' if cuda else 'only-cuda'} here)",
                traceback=[f"Deferred: graded on {where}"],
            )
        ]
        return True

    def _judge(self, cell: NotebookNode, index: int) -> None:
        """Judge a test cell in this process; its outputs become the judge's.

        The cell first waits for its turn on the GPU (:meth:`_gpu_turn`); its time limit
        counts from when it has it, since waiting for other students' cells is no fault of this
        submission's.

        Raises:
            GpuBusy: the turn did not come (the caller stops the notebook).
        """
        points = float(cell.metadata.get("nbgrader", {}).get("points", 0) or 0)
        with self._gpu_turn(cell):
            limit = min(self._deadline(), time.monotonic() + self.timeout)
            via = KernelChannel(self, cell, index, limit)
            try:
                verdict = judge.judge_cell(cell.source, via, points)
            except judge.UnsupportedTestCell as exc:
                verdict = judge.Verdict(outputs=[judge.error_output(exc)])
        cell.outputs = via.student_outputs() + verdict.outputs
        if verdict.error:
            self._record(cell, verdict.error)

    def _record(self, cell: NotebookNode, error: str) -> None:
        """Note a judged cell's failure for the grading report."""
        if error:
            self.resources.setdefault("course_events", []).append(
                {
                    "cell": cell.get("id"),
                    "grade_id": cell.metadata.get("nbgrader", {}).get("grade_id"),
                    "error": error,
                    "message": "judged in the grading process",
                }  # fmt: skip
            )

    # ------------------------------------------------------------------ watchdog
    def _kernel_tree(self) -> list[psutil.Process]:
        """The kernel's processes, the launcher first ([] when there is none)."""
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        if process is None:
            return []
        try:
            root = psutil.Process(process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def _watch(self, stop: threading.Event) -> None:
        """Every 0.5 s: the memory limit and the disk quota."""
        while not stop.wait(0.5):
            tree = self._kernel_tree()
            if not tree:
                continue
            if self.memory_bytes:
                try:
                    rss = sum(_unique_memory(p) for p in tree)
                except psutil.Error:
                    rss = 0
                if rss > self.memory_bytes:
                    self._killed_for_memory.set()
                    kill_processes(tree[::-1])
                    continue
            if self.disk_bytes:
                self._check_disk(tree)

    def _over_quota(self, tmpfs_of: list[psutil.Process]) -> str:
        """Why the kernel is past its disk quota ("" when it is not): its folders, plus the
        sandbox's tmpfs mounts read through ``tmpfs_of`` (a running kernel's processes)."""
        used = quota.disk_usage(self.disk_paths, entries_limit=self.disk_entries + 1)
        used = used + quota.sandbox_tmpfs_usage(p.pid for p in tmpfs_of)
        grown = used.bytes - self._disk_base.bytes
        if grown > self.disk_bytes:
            return (
                f"wrote more than its {self.disk_bytes / 1e9:g} GB disk quota (its folder, home, "
                f"/tmp and /dev/shm in all: {grown / 1e9:.2f} GB)"
            )
        if not used.complete or used.entries > self.disk_entries:
            return f"created more than {self.disk_entries} files (its disk quota)"
        return ""

    def _check_disk(self, tree: list[psutil.Process]) -> None:
        """Stop the kernel past its disk quota (see the module docstring)."""
        why = self._over_quota(tree[1:])
        if not why:
            return
        self._killed_for_disk = f"{why}: the kernel was stopped and what it wrote removed"
        kill_processes(tree[::-1], wait_s=5)
        self._remove_written()

    def _disk_after_kernel(self) -> None:
        """Once a kernel has ended: when its folders hold more than the quota (written faster
        than the watchdog looks, or by the last cells), remove what it wrote there, and say so
        in the notebook's metadata (:data:`DISK_NOTE`), which the grading report reads."""
        if not self.disk_bytes or self._disk_base is None:
            return
        why = self._over_quota([])
        if not why:
            return
        self._remove_written()
        self.nb.metadata[DISK_NOTE] = f"when its kernel ended, it {why}: what it wrote was removed"

    def _remove_written(self) -> None:
        """Remove what the kernel added to the notebook's folder since grading began (its home
        is made anew at the next start; its /tmp and /dev/shm ended with it)."""
        import shutil

        for folder, names in self._disk_listing.items():
            with contextlib.suppress(OSError):
                for entry in os.scandir(folder):
                    if entry.name in names:
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)

    def _disk_baseline(self) -> None:
        """What the kernel's folders hold before the first cell (the warm caches of its home,
        the notebook): the quota counts what grows beyond it."""
        if not self.disk_bytes or self._disk_base is not None:
            return
        self._disk_base = quota.disk_usage(self.disk_paths, entries_limit=10**7)
        self._disk_listing = {}
        for folder in self.disk_paths[:1]:  # the notebook's folder (the home is made anew)
            with contextlib.suppress(OSError):
                self._disk_listing[folder] = set(os.listdir(folder))

    # ------------------------------------------------------------------ execution
    async def _async_handle_timeout(self, timeout, cell=None):
        # nbgrader interrupts and records a CellTimeoutError; a second timeout on the same cell
        # means the interrupt did not stop it.
        if cell is not None and cell.get("id") in self._interrupted:
            raise KernelStuck("did not stop when interrupted")
        if cell is not None:
            self._interrupted.add(cell.get("id"))
        return await super()._async_handle_timeout(timeout, cell)

    def _replay(self, upto: int) -> None:
        """Re-run the non-test code cells before ``upto`` in a fresh kernel, outputs discarded."""
        for index, cell in enumerate(self.nb.cells[:upto]):
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or meta.get("grade"):
                continue
            if any(o.get("output_type") == "error" and o.get("ename") in ("KernelDied", "NotRun")
                   for o in cell.outputs):  # fmt: skip
                continue  # the cell that killed the kernel is not run again
            scratch = copy.deepcopy(cell)
            self.execute_cell(scratch, index, store_history=False)

    def preprocess(self, nb, resources=None, km=None):
        """Execute every code cell as nbgrader does, recovering from dead or stuck kernels."""
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        self._interrupted: set = set()
        self._output_used: dict[int, int] = {}
        self._output_told: dict[int, bool] = {}
        self._skip_set = set(self.skip_sources)
        self._killed_for_memory = threading.Event()
        self._killed_for_disk = ""
        self._executed: list[str] = []
        self._disk_base: quota.DiskUse | None = None
        self._disk_listing: dict[str, set[str]] = {}
        self._started, self._waited = time.monotonic(), 0.0
        index, restarts = 0, 0
        cells = self.nb.cells
        while index < len(cells):
            stop = threading.Event()
            began = time.monotonic()
            with self.setup_kernel():
                try:
                    info = self.wait_for_reply(self.kc.kernel_info())
                    report.STOPWATCH.add("kernel start", time.monotonic() - began)
                    self._disk_baseline()
                    if self.memory_bytes or self.disk_bytes:
                        watch = threading.Thread(target=self._watch, args=(stop,), daemon=True)
                        watch.start()
                    self.nb.metadata["language_info"] = info["content"]["language_info"]
                    if restarts:
                        try:
                            with self._gpu_turn(nbformat.v4.new_code_cell()):  # a shared turn
                                with report.STOPWATCH.timing("cells"):
                                    self._replay(index)
                        except GpuBusy as busy:
                            self._not_run(index, str(busy))
                            index = len(cells)
                    while index < len(cells):
                        if time.monotonic() > self._deadline():
                            self._not_run(
                                index, f"the notebook ran past its {self.notebook_timeout} s limit"
                            )
                            index = len(cells)
                            break
                        cell = cells[index]
                        if self._skip(cell) or self._deferred(cell):
                            index += 1
                            continue
                        try:
                            if (
                                self.judge_tests
                                and self._is_test_cell(cell)
                                and judge.judged_here(cell.source)
                            ):
                                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
                                with report.STOPWATCH.timing("checks", check=grade_id or ""):
                                    self._judge(cell, index)
                            else:
                                with self._gpu_turn(cell), report.STOPWATCH.timing("cells"):
                                    self.preprocess_cell(cell, self.resources, index)
                        except GpuBusy as busy:
                            cell.outputs = []
                            self._error(cell, "GpuBusy", str(busy))
                            self._not_run(index + 1, "this notebook's wait for the GPU ran out")
                            index = len(cells)
                            break
                        except (
                            DeadKernelError, KernelStuck, CellTimeoutError, remote.KernelLost
                        ) as exc:  # fmt: skip
                            if isinstance(exc, remote.KernelLost):
                                exc = exc.args[0] if exc.args else DeadKernelError("lost")
                            why = (
                                f"did not finish within {self.timeout} s and did not stop "
                                "when interrupted; the kernel was restarted"
                                if isinstance(exc, (KernelStuck, CellTimeoutError))
                                else self._kernel_exit()
                            )
                            self._error(cell, "KernelDied", why)
                            index += 1
                            restarts += 1
                            if restarts > self.max_restarts:
                                self._not_run(index, f"the kernel died {restarts} times")
                                index = len(cells)
                            break
                        index += 1
                finally:
                    stop.set()
                    self._killed_for_memory.clear()
                    self._killed_for_disk = ""
            self._disk_after_kernel()
        self.set_widgets_metadata()
        if self.executed_log:
            with open(self.executed_log, "w") as out:
                json.dump(self._executed, out)
        return self.nb, self.resources


MIME_REPLY = remote.MIME
#: Notebook metadata key where :meth:`CourseExecute._disk_after_kernel` leaves its note.
DISK_NOTE = "grader_disk_quota"


class KernelChannel:
    """Reaches the student's kernel for :mod:`grader.grading.judge`: each request runs there as a hidden
    execution (no history, outputs kept apart from the notebook) and its reply is read back as
    plain data (:func:`grader.runtime.remote.reply_from_outputs`).

    Args:
        executor: The :class:`CourseExecute` whose kernel is used.
        cell: The test cell being judged (its id, for the interrupt bookkeeping).
        index: Its index in the notebook.
        deadline: ``time.monotonic()`` value by which every request of the cell must be done.
    """

    #: Printed output kept from the student's code during one test cell, bytes.
    PRINT_LIMIT = 64 * 1024

    def __init__(self, executor: CourseExecute, cell: NotebookNode, index: int, deadline: float):
        self.executor = executor
        self.cell = cell
        self.index = index
        self.deadline = deadline
        self.printed: list[str] = []
        self._printed_bytes = 0

    def student_outputs(self) -> list:
        """What the student's code printed during the requests, as one stdout stream."""
        if not self.printed:
            return []
        return [NotebookNode(output_type="stream", name="stdout", text="".join(self.printed))]

    def _keep_printed(self, outputs: list) -> None:
        for out in outputs:
            if out.get("output_type") != "stream":
                continue
            text = out.get("text", "")
            room = self.PRINT_LIMIT - self._printed_bytes
            if room <= 0:
                return
            if len(text) > room:
                text = text[:room] + "\n[your printed output was cut here]\n"
            self._printed_bytes += len(text)
            self.printed.append(text)

    def request(self, fn, target, args, kwargs):
        """Run one request in the kernel; see :class:`grader.runtime.remote.Channel`.

        Raises:
            grader.runtime.remote.RequestTimedOut: past the cell's time limit (the kernel was
                interrupted).
            grader.runtime.remote.KernelLost: the kernel died or did not stop when interrupted.
        """
        name = target.__name__ if target is not None else None
        code, nonce = remote.request_code(fn, name, args, kwargs)
        remaining = self.deadline - time.monotonic()
        limit = self.executor.timeout
        if remaining <= 0:
            raise remote.RequestTimedOut(f"the checks ran past the cell's {limit} s limit")
        scratch = NotebookNode(
            cell_type="code",
            id=self.cell.get("id"),
            source=code,
            metadata={"grader_request": True},
            outputs=[],
            execution_count=None,
        )
        saved = self.executor.timeout
        self.executor.timeout = max(1, int(remaining + 0.999))
        try:
            self.executor.execute_cell(scratch, self.index, store_history=False)
        except (DeadKernelError, KernelStuck, CellTimeoutError) as exc:
            raise remote.KernelLost(exc) from None
        finally:
            self.executor.timeout = saved
            self.executor.nb.cells[self.index] = self.cell  # nbclient stored the scratch there
        self._keep_printed(scratch.outputs)
        if any(
            o.get("output_type") == "error" and o.get("ename") == "CellTimeoutError"
            for o in scratch.outputs
        ):
            raise remote.RequestTimedOut(
                f"did not finish within the cell's {limit} s limit and was interrupted"
            )
        return remote.reply_from_outputs(scratch.outputs, nonce)
