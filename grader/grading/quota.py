"""Quotas of one grading job, from what the operating system offers, so that a hostile
submission costs no other student anything.

One grading job (:mod:`grader.grading.job`: a grading process and the kernels it starts) gets:

* **a user of its own** (:func:`job_user`) when the grader is root: a uid from a range far
  above any real user's (:data:`UID_BASE`), held by a lock file for the job's life, so the
  per-user limits of the kernel (below) count this job's processes only;
* **a process limit**: ``RLIMIT_NPROC`` for that user (processes *and* threads; set by
  :mod:`grader.grading.sandbox` before the kernel starts), and where the control groups are
  writable, ``pids.max`` of a group holding only the kernel (:class:`JobGroup`); a refused
  fork is counted there and named in the report;
* **its share of the CPU**: a control group of its own (v1 ``cpu`` or v2 ``cpu``) holding the
  grading process and its kernels, so that the scheduler shares the machine between jobs,
  not between threads (a kernel with a hundred spinning threads gets the share of one job,
  and its grading process's handling of a flood is charged to it too);
* **a disk quota** over everything the kernel can write (its folder, its home, ``/tmp`` and
  ``/dev/shm``): the sandbox's ``/tmp`` and ``/dev/shm`` are tmpfs mounts of that size
  (bubblewrap's ``--size``), every file is capped at that size (``RLIMIT_FSIZE``), and the
  grading process measures the total (:func:`disk_usage`, :func:`sandbox_tmpfs_usage`) and
  stops a kernel past it (:class:`grader.grading.execute.CourseExecute`);
* **capped logs** (:class:`CappedLog`): what the job and its kernels write to stdout and
  stderr is kept as its first and last bytes, with the size dropped stated.

Which of these apply depends on the machine: the README's "What is isolated, and what is not"
says where each holds. This module uses only the standard library (it runs in the grading
process and in the sandbox's launcher before the kernel starts).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

#: First uid of the users the grading jobs run their kernels as (root only): far above the
#: uids of real users and of the usual subordinate-uid ranges (100000-165535 per user).
UID_BASE = 1_900_000_000
#: How many job users there are (jobs grading at the same time on one machine, all classes).
UID_SLOTS = 65536


@dataclass
class JobUser:
    """A user of one grading job's own (see :func:`job_user`); :meth:`release` frees it."""

    uid: int
    gid: int
    _fd: int = -1

    def release(self) -> None:
        """Free the uid for another job (also done by the job process's exit)."""
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


def _uid_locks() -> Path:
    run = Path("/run")
    base = run if run.is_dir() and os.access(run, os.W_OK) else Path(tempfile.gettempdir())
    return base / "gpu-course-grader-uids"


def job_user(seed: str, locks: Path | None = None) -> JobUser | None:
    """A uid (and gid) no other running job holds, or None when the grader is not root
    (kernels then run as the grader's user in a user namespace of their own).

    The uid is kept while the returned :class:`JobUser` lives in this process (an exclusive
    ``flock`` on a file of ``locks``, by default ``/run/gpu-course-grader-uids``), so two jobs
    on one machine, of one class or of two, never share one; the search starts at a slot
    derived from ``seed`` (the job's folder).
    """
    if os.geteuid() != 0:
        return None
    import fcntl

    folder = locks or _uid_locks()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    start = int(hashlib.sha256(seed.encode()).hexdigest(), 16) % UID_SLOTS
    for step in range(UID_SLOTS):
        slot = (start + step) % UID_SLOTS
        fd = os.open(folder / str(slot), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return JobUser(UID_BASE + slot, UID_BASE + slot, fd)
    raise RuntimeError(f"all {UID_SLOTS} grading users are taken on this machine")


# ----------------------------------------------------------------------------- control groups
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_groups(proc_cgroup: str) -> dict[str, str]:
    """controller -> this process's group path, from ``/proc/self/cgroup`` text; the unified
    (v2) hierarchy under the key ``""``."""
    out: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            out[controller] = path
    return out


class JobGroup:
    """Control groups of one grading job: a CPU share for the job, a process limit for its
    kernel. Made by :meth:`create`, which returns None where no control group can be written
    (not root, a read-only ``/sys/fs/cgroup``, no ``cpu`` or ``pids`` controller).

    Two layouts:

    * **v1** (separate hierarchies): ``cpu/<name>`` holds the grading process (and so the
      kernels it starts), ``pids/<name>`` the kernel (:meth:`kernel_procs`);
    * **v2** (unified): ``<name>`` with the ``cpu`` and ``pids`` controllers for its children,
      ``<name>/grading`` holding the grading process and ``<name>/kernel`` the kernel, with
      ``pids.max`` (a v2 group that has children may hold no process itself).

    Attributes:
        processes: The kernel's limit of processes and threads.
        cpu_dirs: The groups whose ``cgroup.procs`` the grading process joins.
        kernel_dirs: The groups whose ``cgroup.procs`` the kernel's launcher joins.
        made: Every folder made, innermost first (removed by :meth:`remove`).
    """

    def __init__(self, processes: int, cpu_dirs, kernel_dirs, made, home_dirs) -> None:
        self.processes = processes
        #: the groups the grading process leaves the job's for (:meth:`remove`)
        self.home_dirs: list[Path] = list(home_dirs)
        self.cpu_dirs: list[Path] = list(cpu_dirs)
        self.kernel_dirs: list[Path] = list(kernel_dirs)
        self.made: list[Path] = list(made)
        self._joined = False

    @classmethod
    def create(
        cls, name: str, processes: int, root: Path = CGROUP_ROOT, proc_cgroup: str | None = None
    ) -> JobGroup | None:
        """Make the groups of a job called ``name`` under this process's own groups (see the
        class), or None where that cannot be done here."""
        if proc_cgroup is None:
            try:
                proc_cgroup = Path("/proc/self/cgroup").read_text()
            except OSError:
                return None
        own = _own_groups(proc_cgroup)
        made: list[Path] = []
        try:
            if (root / "cgroup.controllers").is_file():  # v2 mounted at the root
                return cls._create_v2(name, processes, root / own.get("", "/").lstrip("/"), made)
            return cls._create_v1(name, processes, root, own, made)
        except OSError:
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            return None

    @classmethod
    def _create_v1(cls, name, processes, root, own, made) -> JobGroup | None:
        found = {}
        for controller in ("cpu", "pids"):
            if controller not in own:
                return None
            mounts = [root / c for c in os.listdir(root) if controller in c.split(",")]
            if not mounts:
                return None
            parent = mounts[0] / own[controller].lstrip("/")
            folder = parent / name
            folder.mkdir()
            made.insert(0, folder)
            found[controller] = folder
        (found["pids"] / "pids.max").write_text(str(processes))
        return cls(processes, [found["cpu"]], [found["pids"]], made, [found["cpu"].parent])

    @classmethod
    def _create_v2(cls, name, processes, parent, made) -> JobGroup | None:
        available = (parent / "cgroup.subtree_control").read_text().split()
        if "cpu" not in available or "pids" not in available:
            return None
        job = parent / name
        job.mkdir()
        made.insert(0, job)
        (job / "cgroup.subtree_control").write_text("+cpu +pids")
        grading, kernel = job / "grading", job / "kernel"
        for folder in (grading, kernel):
            folder.mkdir()
            made.insert(0, folder)
        (kernel / "pids.max").write_text(str(processes))
        return cls(processes, [grading], [kernel], made, [parent])

    def join(self, pid: int | None = None) -> None:
        """Move the grading process (``pid``, default this one) into the job's CPU group
        (:meth:`remove` moves this process back to :attr:`home_dirs`)."""
        pid = pid or os.getpid()
        for folder in self.cpu_dirs:
            (folder / "cgroup.procs").write_text(str(pid))
        self._joined = pid == os.getpid()

    def kernel_procs(self) -> list[str]:
        """The files a kernel's launcher writes its pid to (``cgroup.procs`` of the kernel's
        groups), handed to :mod:`grader.grading.sandbox`."""
        return [str(folder / "cgroup.procs") for folder in self.kernel_dirs]

    def refused_forks(self) -> int:
        """How many forks (or new threads) of the kernel the process limit refused."""
        total = 0
        for folder in self.kernel_dirs:
            with contextlib.suppress(OSError, ValueError):
                for line in (folder / "pids.events").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "max":
                        total += int(value)
        return total

    def remove(self) -> None:
        """Leave the groups and remove them (best effort: a group that still holds a process
        stays, and is empty once that process ends)."""
        for parent in self.home_dirs if self._joined else []:
            with contextlib.suppress(OSError):
                (parent / "cgroup.procs").write_text(str(os.getpid()))
        for folder in self.made:
            with contextlib.suppress(OSError):
                folder.rmdir()


def join_groups(procs_files: list[str]) -> list[str]:
    """Write this process's pid into each ``cgroup.procs`` file given (the kernel's launcher,
    before it becomes the kernel); return the errors, one line each (a machine without
    writable groups grades without them)."""
    errors = []
    for procs in procs_files:
        try:
            Path(procs).write_text(str(os.getpid()))
        except OSError as exc:
            errors.append(f"{procs}: {exc}")
    return errors


# ----------------------------------------------------------------------------- disk
@dataclass(frozen=True)
class DiskUse:
    """What a kernel has on disk.

    Attributes:
        bytes: Bytes allocated (``st_blocks``; a sparse file counts what it holds).
        entries: Files, folders and links.
        complete: False when counting stopped at the entry limit.
    """

    bytes: int
    entries: int
    complete: bool = True

    def __add__(self, other: DiskUse) -> DiskUse:
        return DiskUse(
            self.bytes + other.bytes, self.entries + other.entries, self.complete and other.complete
        )


def disk_usage(paths, entries_limit: int = 1_000_000) -> DiskUse:
    """Bytes allocated and entries under ``paths`` (symbolic links not followed, each inode
    counted once), counting at most ``entries_limit`` entries."""
    seen: set[tuple[int, int]] = set()
    total, entries = 0, 0
    todo = [str(p) for p in paths]
    while todo:
        folder = todo.pop()
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    entries += 1
                    if entries > entries_limit:
                        return DiskUse(total, entries, complete=False)
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    key = (st.st_dev, st.st_ino)
                    if key in seen:
                        continue
                    seen.add(key)
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
        except OSError:
            continue
    return DiskUse(total, entries)


#: The sandbox's own tmpfs mounts, measured through a sandboxed process's ``/proc/PID/root``.
SANDBOX_TMPFS = ("tmp", "dev/shm")


def sandbox_tmpfs_usage(pids) -> DiskUse:
    """What the sandbox's private ``/tmp`` and ``/dev/shm`` hold (bytes used, inodes used),
    read through the first of ``pids`` whose root is not this process's (a process inside the
    sandbox); zero when none is."""
    here = os.stat("/")
    for pid in pids:
        try:
            root = os.stat(f"/proc/{pid}/root/")
        except OSError:
            continue
        if (root.st_dev, root.st_ino) == (here.st_dev, here.st_ino):
            continue
        total = DiskUse(0, 0)
        for mount in SANDBOX_TMPFS:
            with contextlib.suppress(OSError):
                st = os.statvfs(f"/proc/{pid}/root/{mount}")
                total = total + DiskUse(
                    (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree
                )
        return total
    return DiskUse(0, 0)


# ----------------------------------------------------------------------------- logs
class CappedLog:
    """A log file fed through a pipe that keeps the first ``head`` and the last ``tail`` bytes
    of what is written to it and states the size dropped between them.

    Give :attr:`fd` (the pipe's write end) to the writers (``os.dup2(log.fd, 2)``); a thread
    of this process reads the pipe. :meth:`close` waits for every writer to have closed its
    end (or ``wait_s`` seconds), then writes the tail. A writer faster than the disk waits on
    the pipe, never the grader.
    """

    def __init__(self, path: str | Path, head: int = 512 * 1024, tail: int = 512 * 1024):
        self.path, self.head, self.tail = Path(path), head, tail
        self.dropped = 0
        read_fd, self.fd = os.pipe()
        self._file = self.path.open("wb")
        self._kept = 0
        self._ring: collections.deque[bytes] = collections.deque()
        self._ring_bytes = 0
        self._thread = threading.Thread(
            target=self._read, args=(read_fd,), name="capped-log", daemon=True
        )
        self._thread.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                room = self.head - self._kept
                if room > 0:
                    self._file.write(chunk[:room])
                    self._file.flush()
                    self._kept += min(room, len(chunk))
                    chunk = chunk[room:]
                if chunk:
                    self._ring.append(chunk)
                    self._ring_bytes += len(chunk)
                    while self._ring_bytes - len(self._ring[0]) >= self.tail:
                        gone = len(self._ring.popleft())
                        self._ring_bytes -= gone
                        self.dropped += gone

    def close(self, wait_s: float = 10) -> None:
        """Close this process's write end, wait for the reader (every other writer must have
        closed its end too), then write the kept tail and the size dropped."""
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self._thread.join(timeout=wait_s)
        tail = b"".join(self._ring)
        if len(tail) > self.tail:
            self.dropped += len(tail) - self.tail
            tail = tail[-self.tail :]
        if self.dropped:
            note = (
                f"\n[... {self.dropped} bytes dropped by the grader's log cap: the first "
                f"{self.head} and the last {self.tail} bytes are kept ...]\n"
            )
            self._file.write(note.encode())
        self._file.write(tail)
        self._file.close()
