"""Installed in every grading kernel before the submission's first cell runs.

The course's grading command starts each kernel with
``--IPKernelApp.exec_lines=["import grader.grading.guard; grader.grading.guard.install('<settings>')"]``, so
this runs before any student code. Verdicts are not made in the kernel (the checks run in the
grading process, :mod:`grader.grading.judge`); the guard makes the kernel's own work harder to
subvert and records attempts for review. It

* moves the kernel into the notebook's folder (it starts in an empty one) and takes that
  folder and ``''`` off ``sys.path``, imports the assignment's probes, and from then on
  **blocks** reading the course's protected files (``solutions/``, the gradebook, the
  instructor's working folders, other submissions, ``.git``, the sample answers), writing
  anywhere in the course folder except the submission's own folder, and opening
  ``/proc/<pid>/mem`` (rewriting the process's own code);
* **records** to an audit log (read by the grading process after the kernel has ended) what a
  submission's own code does that could reach the grading machinery: dynamic code (``exec``,
  ``eval``, ``compile`` on strings), replacing a function's code object, frame and garbage
  collector introspection, tracing hooks, ``ctypes``, files opened outside its folder, and
  every blocked access. It uses a CPython audit hook (PEP 578), which cannot be removed once
  installed; events are recorded when the submission's code is anywhere on the calling stack
  (a notebook cell, a file in its folder, a thread or a library such as ``bdb`` it called),
  so the course's own code and libraries alone do not count. Records go through a pipe the
  grading process reads (a kernel can add to it, not take back what was sent), each numbered
  and signed with the job's key, one per execution naming the request id the grading process
  chose (:func:`verify_log`: a cut, redirected or forged channel flags the submission); the
  settings file that holds the key is deleted once read (``install(..., consume=True)``);
* **restores the kernel's machinery before every cell** (and so before every request of the
  grader): it snapshots, at start-up, the attributes of the course's ``grader`` modules (the
  probes included), of ``torch.testing``, of ``builtins`` and their ``sys.modules`` entries,
  and IPython's input and AST transformers and event callbacks; before each cell anything
  replaced, deleted, swapped or added is put back and recorded;
* caps each cell's printed output (an endless ``print`` loop cannot fill the grader's memory);
* on a GPU, caps this process's share of GPU memory
  (``torch.cuda.set_per_process_memory_fraction``), so parallel gradings share the device.

An audit hook sees events, not assignments: patching a module attribute
(``grader.runtime.remote.serve = ...``) raises no event; the snapshot undoes it before the next cell,
and :mod:`grader.grading.scan` finds it in the submission's source. A determined attacker can defeat any
in-process guard (through ``ctypes``, for one, which is recorded); what the guard and the scan
find is reported for **manual review**. What the kernel hands back can only be plain data
(:mod:`grader.runtime.handover`), and values are compared with the reference in the grading process,
so defeating the guard can at most forge a probe's own measurements (timings, recorded calls).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: Audit events recorded when the submission's own code triggers them directly.
WATCHED = frozenset(
    {
        "_thread.start_new_thread",
        "exec",
        "compile",
        "object.__setattr__",
        "object.__delattr__",
        "sys._getframe",
        "sys._current_frames",
        "sys.settrace",
        "sys.setprofile",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "os.listdir",
        "os.scandir",
    }
)
#: Path events: (event, index of the path argument, is it a write).
PATH_EVENTS = {
    "open": (0, None),
    "os.remove": (0, True),
    "os.rename": (0, True),
    "os.rmdir": (0, True),
    "os.truncate": (0, True),
    "shutil.rmtree": (0, True),
    "shutil.copyfile": (1, True),
    "os.chmod": (0, True),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@dataclass
class GuardSettings:
    """What the guard protects, written as JSON by the grading process.

    Attributes:
        assignment: Assignment id whose reference is loaded before blocking.
        audit_log: File the guard appends its JSON-lines records to.
        blocked: Folders and files no code of the kernel may read or write after start-up.
        writable: Folders where writing is normal (the submission's own folder, temp dirs).
        protected_writes: Folders where the submission may not write (the course folder).
        student_dirs: Folders whose files count as the submission's own code (readable and
            writable, even inside a blocked folder).
        own_dirs: More folders of the kernel's own (its home and caches; readable, writable).
        gpu_fraction: Share of each GPU's memory this process may use (1 for all).
        output_bytes: Largest printed output per cell, bytes.
        notebook_dir: Folder to work in once installed ("" to stay where the kernel started).
        audit_key: Hex key the guard signs its records with (HMAC-SHA256), chosen by the
            grading process per job ("" for unsigned records).
    """

    assignment: str
    audit_log: str
    blocked: list[str] = field(default_factory=list)
    writable: list[str] = field(default_factory=list)
    protected_writes: list[str] = field(default_factory=list)
    student_dirs: list[str] = field(default_factory=list)
    own_dirs: list[str] = field(default_factory=list)
    gpu_fraction: float = 1.0
    output_bytes: int = 2 * 1024**2
    notebook_dir: str = ""
    audit_key: str = ""

    def write(self, path: str | Path) -> Path:
        """Save as JSON; return the path."""
        Path(path).write_text(json.dumps(asdict(self), indent=1))
        return Path(path)


def _open_log(path: str):
    """Open the audit log for appending: a pipe the grading process reads (opened without
    blocking, waiting up to 10 s for its reader), or a plain file."""
    import stat
    import time

    try:
        is_fifo = stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        is_fifo = False
    if not is_fifo:
        return open(path, "a", buffering=1)  # noqa: SIM115 - open for the kernel's life
    deadline = time.monotonic() + 10
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            if time.monotonic() > deadline:
                return open(os.devnull, "w")  # noqa: SIM115 - no reader: records are lost
            time.sleep(0.05)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "w", buffering=1)


#: How many frames up the stack the guard looks for the submission's code.
STACK_DEPTH = 40
#: Library files that only pass on code a caller gave them (a debugger running a string, a
#: thread running a target): an event raised in them on behalf of the submission's code counts
#: as the submission's. Imports do not pass through them, so importing a library does not count.
TRAMPOLINES = (
    "/bdb.py",
    "/pdb.py",
    "/code.py",
    "/codeop.py",
    "/runpy.py",
    "/threading.py",
    "/functools.py",
    "/contextlib.py",
    "/concurrent/futures/thread.py",
    "/asyncio/events.py",
    "/IPython/core/interactiveshell.py",  # wraps open() for notebook cells
)


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


class _Guard:
    def __init__(self, settings: GuardSettings):
        self.s = settings
        self.blocked = [os.path.realpath(p) for p in settings.blocked]
        self.writable = [os.path.realpath(p) for p in settings.writable]
        self.protected = [os.path.realpath(p) for p in settings.protected_writes]
        self.log_path = os.path.realpath(settings.audit_log)
        self.student_dirs = [os.path.realpath(p) for p in settings.student_dirs]
        self.own = [os.path.realpath(p) for p in (*settings.student_dirs, *settings.own_dirs)]
        self.cell_dir = os.path.realpath(tempfile.gettempdir()) + os.sep + "ipykernel_"
        self.busy = threading.local()
        self.log = _open_log(self.log_path)
        self.seen: set[tuple] = set()
        self._key = bytes.fromhex(settings.audit_key) if settings.audit_key else b""
        self._seq = 0
        self._seq_lock = threading.Lock()

    # ------------------------------------------------------------------ helpers
    def is_student_file(self, filename: str) -> bool:
        if filename.startswith(self.cell_dir) or filename.startswith("<ipython-input"):
            return True
        real = os.path.realpath(filename) if filename and not filename.startswith("<") else ""
        return bool(real) and _under(real, self.student_dirs)

    def record(self, kind: str, detail: str, frame=None) -> None:
        where = ""
        if frame is not None:
            import linecache

            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
            where = f"line {frame.f_lineno}: {line[:160]}"
        key = (kind, detail[:200], where)
        if key in self.seen:
            return
        self.seen.add(key)
        self.write({"kind": kind, "detail": detail[:300], "where": where})

    def write(self, record: dict) -> None:
        """Send one record, numbered and signed (:func:`sign`), through the audit pipe."""
        with self._seq_lock:
            record = {**record, "seq": self._seq}
            self._seq += 1
            if self._key:
                record["mac"] = sign(self._key, record)
            self.log.write(json.dumps(record) + "\n")

    @staticmethod
    def _path_of(arg) -> str | None:
        if isinstance(arg, bytes):
            arg = os.fsdecode(arg)
        if isinstance(arg, (str, os.PathLike)):
            return os.path.realpath(os.fspath(arg))
        return None

    # ------------------------------------------------------------------ the hook
    def hook(self, event: str, args: tuple) -> None:
        if event not in WATCHED and event not in PATH_EVENTS and not event.startswith("ctypes."):
            return
        if getattr(self.busy, "on", False):
            return
        self.busy.on = True
        try:
            self._hook(event, args)
        finally:
            self.busy.on = False

    def _student_frame(self, frame):
        """The frame of the submission's code that raised the event: the direct caller, or the
        nearest caller reached through :data:`TRAMPOLINES` only; None when there is none."""
        depth = 0
        while frame is not None and depth < STACK_DEPTH:
            filename = frame.f_code.co_filename
            if self.is_student_file(filename):
                return frame
            if not filename.endswith(TRAMPOLINES):
                return None
            frame = frame.f_back
            depth += 1
        return None

    def _hook(self, event: str, args: tuple) -> None:
        caller = sys._getframe(2)  # 0: _hook, 1: hook, 2: the caller of the event
        found = self._student_frame(caller)
        student = found is not None
        frame = found or caller
        if event in PATH_EVENTS:
            index, write = PATH_EVENTS[event]
            path = self._path_of(args[index]) if len(args) > index else None
            if path is None:
                return
            if write is None:  # open(path, mode, flags)
                mode = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
                flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
                write = any(c in mode for c in "wax+") or bool(flags & _WRITE_FLAGS)
            if path.startswith("/proc/") and path.endswith("/mem"):
                self.record("blocked", f"{event} {path} (the process's own memory)", frame)
                raise PermissionError("blocked by the course's grader: process memory")
            if _under(path, self.own) and path != self.log_path:
                return  # the submission's own folder and the kernel's home
            if path == self.log_path:
                self.record("blocked", f"{event} of the grader's audit log", frame)
                raise PermissionError("the grader's audit log is not accessible")
            if _under(path, self.blocked):
                self.record("blocked", f"{event} {'write' if write else 'read'} {path}", frame)
                raise PermissionError(f"blocked by the course's grader: {path}")
            if write and _under(path, self.protected) and not _under(path, self.writable):
                self.record("blocked", f"{event} write {path}", frame)
                raise PermissionError(f"blocked by the course's grader: writing {path}")
            if student and write and not _under(path, self.writable):
                self.record("write-outside", f"{event} {path}", frame)
            return
        if not student:
            return
        if event in ("exec", "compile"):
            source = args[0]
            if isinstance(source, (str, bytes)):
                self.record("dynamic-code", f"{event} of a string", frame)
            elif event == "exec" and hasattr(source, "co_filename"):
                if not self.is_student_file(source.co_filename):
                    self.record("dynamic-code", f"exec of code from {source.co_filename}", frame)
        elif event in ("object.__setattr__", "object.__delattr__"):
            name = args[1] if len(args) > 1 else "?"
            self.record("code-swap", f"{event} {type(args[0]).__name__}.{name}", frame)
        elif event == "_thread.start_new_thread":
            target = args[0] if args else None
            inner = getattr(target, "__self__", None)  # a bound Thread.run: its target
            inner_target = getattr(inner, "_target", None)
            for candidate in (target, inner_target):
                if (
                    candidate in (exec, eval, compile)
                    or getattr(candidate, "__module__", "") == "builtins"
                ):
                    name = getattr(candidate, "__name__", "?")
                    self.record("dynamic-code", f"a thread running {name}", frame)
        elif event in ("os.listdir", "os.scandir"):
            path = self._path_of(args[0]) if args else None
            if path and (path.startswith("/proc") or _under(path, self.blocked)):
                self.record("introspection", f"{event} {path}", frame)
        else:
            self.record("introspection", event, frame)


_GUARD: _Guard | None = None

#: Modules (besides every ``grader.*`` module) whose attributes are restored before each cell.
PROTECTED_MODULES = ("builtins", "torch.testing", "torch.testing._comparison")
#: Builtins that IPython and ipykernel themselves swap in and out around each cell.
KERNEL_BUILTINS = frozenset({"input", "raw_input", "get_ipython", "exit", "quit", "display"})


def _machinery(namespace: dict) -> dict:
    """The functions, classes and modules of a namespace (its data may change legitimately)."""
    import types

    kinds = (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType)
    return {k: v for k, v in namespace.items() if isinstance(v, kinds) or callable(v)}


def _code_objects(obj) -> list:
    """The code objects behind a callable or an object with methods (for :func:`_from_student`)."""
    codes = []
    for candidate in (obj, getattr(obj, "__func__", None), getattr(obj, "__call__", None)):  # noqa: B004
        code = getattr(candidate, "__code__", None) or getattr(
            getattr(candidate, "__func__", None), "__code__", None
        )
        if code is not None:
            codes.append(code)
    for value in vars(type(obj)).values() if not isinstance(obj, type) else ():
        code = getattr(value, "__code__", None)
        if code is not None:
            codes.append(code)
    return codes


def _from_student(obj) -> bool:
    """Whether a hook or transformer was written in the submission (a notebook cell or a file
    in its folder)."""
    if _GUARD is None:
        return False
    return any(_GUARD.is_student_file(code.co_filename) for code in _code_objects(obj))


class _Snapshot:
    """The kernel's machinery as it was at start-up, put back before each cell."""

    def __init__(self, shell=None) -> None:
        self.modules = {
            name: module
            for name, module in list(sys.modules.items())
            if module is not None
            and (name == "grader" or name.startswith("grader.") or name in PROTECTED_MODULES)
        }
        self.attributes = {name: _machinery(vars(m)) for name, m in self.modules.items()}
        for key in KERNEL_BUILTINS:
            self.attributes.get("builtins", {}).pop(key, None)
        self.code = {
            (name, key): value.__code__
            for name, attrs in self.attributes.items()
            for key, value in attrs.items()
            if callable(value) and hasattr(value, "__code__")
        }
        self.shell = shell

    def restore(self) -> list[str]:
        """Undo every change since start-up; return what was changed, in words."""
        changes = []
        for name, module in self.modules.items():
            if sys.modules.get(name) is not module:
                sys.modules[name] = module
                changes.append(f"sys.modules[{name!r}] replaced")
            changes += self._restore_dict(name, vars(module), self.attributes[name])
        for (name, key), code in self.code.items():
            fn = self.attributes[name][key]
            if getattr(fn, "__code__", code) is not code:
                fn.__code__ = code
                changes.append(f"{name}.{key}.__code__ swapped")
        if self.shell is not None:
            changes += self._restore_ipython()
        return changes

    def _restore_ipython(self) -> list[str]:
        """Take out input transformers, AST transformers and event callbacks that the
        submission's code added (libraries may add their own: matplotlib's inline backend
        registers a callback when pyplot is first imported)."""
        changes = []
        shell = self.shell
        lists = {
            attr: getattr(shell, attr, None)
            for attr in (
                "input_transformers_cleanup",
                "input_transformers_post",
                "ast_transformers",
            )
        }
        lists.update({f"{event!r} callbacks": cbs for event, cbs in shell.events.callbacks.items()})
        for name, current in lists.items():
            if not isinstance(current, list):
                continue
            kept = [item for item in current if not _from_student(item)]
            if len(kept) != len(current):
                current[:] = kept
                changes.append(f"IPython {name}: the submission's additions taken out")
        return changes

    @staticmethod
    def _restore_dict(name: str, current: dict, saved: dict) -> list[str]:
        changes = []
        for key, value in saved.items():
            if key not in current:
                current[key] = value
                changes.append(f"{name}.{key} deleted")
            elif current[key] is not value:
                current[key] = value
                changes.append(f"{name}.{key} replaced")
        return changes


def _cap_output(limit: int) -> None:
    """Stop printing after ``limit`` bytes per cell; say so once.

    IPython swaps ``sys.stdout.write`` around every cell (to keep the output in its history)
    and puts its own back afterwards, so the cap is wrapped around it anew before each cell.
    """
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - always present in a kernel
        return
    shell = get_ipython()
    if shell is None:
        return
    state = {"used": 0, "told": False}

    def capped(stream):
        original = stream.write

        def write(text, *args, **kwargs):
            if state["used"] >= limit:
                if not state["told"]:
                    state["told"] = True
                    original(
                        f"\n[output truncated by the course's grader after {limit // 1024} KiB]\n"
                    )
                return len(text)
            state["used"] += len(text)
            return original(text, *args, **kwargs)

        stream.write = write

    def before_cell(*_):
        state["used"], state["told"] = 0, False
        for stream in (sys.stdout, sys.stderr):
            capped(stream)

    shell.events.register("pre_run_cell", before_cell)


def sign(key: bytes, record: dict) -> str:
    """The HMAC-SHA256 of a record (every field but ``mac``, as sorted JSON), hex."""
    import hashlib
    import hmac

    body = json.dumps({k: v for k, v in record.items() if k != "mac"}, sort_keys=True)
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def verify_log(records: list[dict], key: str, executed: list[str]) -> list[str]:
    """What is wrong with a job's audit channel, one line each ([] when nothing is).

    Every record must carry the signature of the job's ``key`` (a record written by anything
    but the guard has none that verifies), the records of one kernel (from its ``installed``
    record on) must be numbered 0, 1, 2, ... without a gap, and every execution the grading
    process saw complete (``executed``: the request ids it chose, in order) must have its
    ``cell`` record: a kernel that pointed the guard's pipe elsewhere (``os.dup2``), closed
    it, or removed the guard's hook leaves them missing.
    """
    problems: list[str] = []
    raw_key = bytes.fromhex(key) if key else b""
    forged = gaps = 0
    expected = None
    cells: set[str] = set()
    for record in records:
        if record.get("kind") in ("flood", "corrupt") and "mac" not in record:
            continue  # written by the grading process's reader, or a broken line (below)
        if raw_key and (
            not isinstance(record.get("mac"), str)
            or not _same(record["mac"], sign(raw_key, record))
        ):
            forged += 1
            continue
        seq = record.get("seq")
        if record.get("kind") == "installed":
            expected = 0  # a kernel's first record
        if not isinstance(seq, int) or seq != expected:
            gaps += 1
        expected = (seq if isinstance(seq, int) else -1) + 1
        if record.get("kind") == "cell":
            cells.add(str(record.get("detail")))
    if forged:
        problems.append(f"{forged} audit record(s) not signed by the guard (forged or corrupted)")
    if gaps:
        problems.append(f"audit records out of sequence {gaps} time(s) (some were lost or cut)")
    missing = [i for i, msg_id in enumerate(executed) if msg_id not in cells]
    if missing:
        problems.append(
            f"the audit channel went silent: no record of {len(missing)} of the "
            f"{len(executed)} executions, from execution {missing[0] + 1} on (the guard's pipe "
            "was cut or redirected, or its hook removed)"
        )
    return problems


def _same(a: str, b: str) -> bool:
    import hmac

    return hmac.compare_digest(a.encode(), b.encode())


def install(settings_path: str, consume: bool = False) -> None:
    """Install the guard in this kernel (see the module docstring).

    Args:
        settings_path: A :class:`GuardSettings` JSON file.
        consume: Delete the file once read (the grading command's copy in the kernel's own
            folder: no process the submission starts can then read the instructor's paths).
    """
    global _GUARD
    if _GUARD is not None:
        return
    settings = GuardSettings(**json.loads(Path(settings_path).read_text()))
    if consume:
        Path(settings_path).unlink(missing_ok=True)
    import importlib

    import torch  # noqa: F401 - imported before student code, as the probes use it
    import torch.testing

    from grader.checks import common  # noqa: F401 - in the snapshot from the start

    if settings.assignment:
        importlib.import_module(f"grader.checks.ch{settings.assignment}")  # its probes
    if settings.notebook_dir:
        start = os.getcwd()
        os.chdir(settings.notebook_dir)
        sys.path[:] = [p for p in sys.path if p not in ("", ".", start, settings.notebook_dir)]
    _GUARD = _Guard(settings)
    _GUARD.record("installed", f"assignment {settings.assignment}; grading={common.grading_mode()}")
    if settings.gpu_fraction < 1 and torch.cuda.is_available():
        try:  # starts CUDA here; whatever CUDA does, the guard below is installed
            for index in range(torch.cuda.device_count()):
                torch.cuda.set_per_process_memory_fraction(float(settings.gpu_fraction), index)
        except Exception as exc:  # noqa: BLE001 - recorded for the grading report
            _GUARD.record("gpu", f"GPU memory share not set: {type(exc).__name__}: {exc}")
    sys.addaudithook(_GUARD.hook)
    _cap_output(settings.output_bytes)
    _restore_before_each_cell()


def _restore_before_each_cell() -> None:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - always present in a kernel
        return
    shell = get_ipython()
    if shell is None:  # not in a kernel (tests): nothing to hook
        return

    def restore(*_):
        header = getattr(shell, "parent_header", None) or {}
        msg_id = header.get("msg_id") if isinstance(header, dict) else None
        _GUARD.write({"kind": "cell", "detail": str(msg_id), "where": ""})
        for change in snapshot.restore():
            _GUARD.record("tampering", f"{change}; restored before the next cell")

    shell.events.register("pre_run_cell", restore)
    snapshot = _Snapshot(shell)


def read_log(path: str | Path) -> list[dict]:
    """The records of an audit log (an empty list when there is none)."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            out.append({"kind": "corrupt", "detail": line[:200], "where": ""})
    return out
