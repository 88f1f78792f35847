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
  limit usually turns a runaway allocation into a ``MemoryError`` first).

Every cell that did not run to completion ends with an error output, so nbgrader scores it 0
(an unexecuted grade cell without an error would otherwise get full marks). The reasons are
kept in ``resources["course_events"]`` for the grading report.
"""

from __future__ import annotations

import contextlib
import copy
import signal
import threading
import time

import psutil
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Integer, List, Unicode

from .sandbox import SandboxKernelManager


def kill_processes(procs: list[psutil.Process], wait_s: float = 0.0) -> None:
    """Kill ``procs`` in the order given (children before parents), skipping any already
    gone, then wait up to ``wait_s`` seconds for them to end."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    if wait_s:
        psutil.wait_procs(procs, timeout=wait_s)


class KernelStuck(RuntimeError):
    """The kernel did not stop after an interrupt: it is killed and restarted."""


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
            return f"the kernel was stopped: it used more than {self.memory_bytes / 1e9:.1f} GB of memory"
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

    # ------------------------------------------------------------------ watchdog
    def _watch_memory(self, stop: threading.Event) -> None:
        while not stop.wait(0.5):
            process = getattr(getattr(self.km, "provisioner", None), "process", None)
            if process is None:
                continue
            try:
                root = psutil.Process(process.pid)
                tree = [root, *root.children(recursive=True)]
                rss = sum(p.memory_info().rss for p in tree)
            except psutil.Error:
                continue
            if rss > self.memory_bytes:
                self._killed_for_memory.set()
                kill_processes(tree[::-1])

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
        self._skip_set = set(self.skip_sources)
        self._killed_for_memory = threading.Event()
        deadline = time.monotonic() + self.notebook_timeout
        index, restarts = 0, 0
        cells = self.nb.cells
        while index < len(cells):
            stop = threading.Event()
            with self.setup_kernel():
                if self.memory_bytes:
                    threading.Thread(target=self._watch_memory, args=(stop,), daemon=True).start()
                try:
                    info = self.wait_for_reply(self.kc.kernel_info())
                    self.nb.metadata["language_info"] = info["content"]["language_info"]
                    if restarts:
                        self._replay(index)
                    while index < len(cells):
                        if time.monotonic() > deadline:
                            self._not_run(
                                index, f"the notebook ran past its {self.notebook_timeout} s limit"
                            )
                            index = len(cells)
                            break
                        cell = cells[index]
                        if self._skip(cell):
                            index += 1
                            continue
                        try:
                            self.preprocess_cell(cell, self.resources, index)
                        except (DeadKernelError, KernelStuck, CellTimeoutError) as exc:
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
        self.set_widgets_metadata()
        return self.nb, self.resources
