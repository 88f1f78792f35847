"""One isolation policy for a grading kernel: what it may see, write and reach.

The sandbox (:mod:`grader.grading.sandbox`, enforced by the operating system when bubblewrap is
available) and the guard (:mod:`grader.grading.guard`, inside the kernel, which records and blocks what
it can) are both built from the same :class:`IsolationPolicy`, so they cannot disagree about what
is protected. The policy of one submission:

* **hidden**: the course's answers and tests (``solutions/``, ``.git``, the sample answers) and
  the instructor's data (the working folder: gradebook, other submissions, results, the
  submissions folder). Checks run in the grading process (:mod:`grader.grading.judge`), so the kernel
  never needs any of it;
* **visible, read-only**: only what the kernel needs: the system folders, the Python
  environment and the course (its answers hidden as above; each checks module replaced by
  the kernel's view of it, which holds its probes and no expected value, and the checks'
  bytecode and data hidden: :mod:`grader.grading.kernel_view`); nothing else of the machine
  (other users' homes, the grader's home, ``/var``, ``/opt``) exists in the sandbox;
* **writable**: the folder of the graded notebook and the kernel's own folder (its home, made
  anew at every kernel start, caches, the socket files of its connection); a private ``/tmp``
  and ``/dev/shm``; nothing else (the rest of the file system is read-only); all of it within
  the job's disk quota (:mod:`grader.grading.quota`);
* **whose rights**: never the grader's when it is root: the kernel runs as a user of the
  job's own (:func:`grader.grading.quota.job_user`; ``nobody`` without one) in a user
  namespace of its own (:func:`grader.grading.sandbox.kernel_ids`), owning only its own
  folders and files, with a limit on its processes and threads;
* **what the kernel's children can read**: the guard's settings (which name the instructor's
  folders) are handed over in a file the guard deletes once read, and bubblewrap's options
  (every hidden path) through a file descriptor, not its command line;
* **not reachable**: the network (a network namespace of its own, loopback only: the kernel
  talks to the grader over Unix sockets), other processes (a PID namespace), System V IPC,
  the grader's environment variables (an allow-list is passed on);
* **start-up**: the kernel starts in an empty read-only folder with Python's safe-path mode
  and no user site-packages, so no file a student wrote can be imported or run before the
  guard; it then moves to the notebook's folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grader.grading import kernel_view
from grader.grading.guard import GuardSettings
from grader.grading.options import GradingOptions
from grader.grading.sandbox import GUARD_COPY, SandboxSettings
from grader.runtime import course


@dataclass
class IsolationPolicy:
    """The isolation of one submission's kernel.

    Attributes:
        work: The instructor's working folder (gradebook, staging, results).
        submitted_root: The folder of every student's submission.
        job_dir: The submission's private grading folder (under ``work``).
        notebook_dir: Where the graded notebook lives and the kernel works (writable).
        box: The kernel's own folder (home, caches; writable).
        sockets: A short folder for the kernel's connection sockets (writable).
        options: The class's grading options.
        seed_home: Warm caches copied into each fresh home (or None).
        private_tmp: The grading command's private temporary folder (its fork server's socket,
            every job's kernel sockets): hidden from kernels, which see only their own
            ``sockets`` folder inside it. Under ``/tmp`` it is hidden anyway; elsewhere (a
            ``TMPDIR`` on another disk) a read-only view would still let a kernel connect to
            those sockets.
        gpu_lock: The machine's GPU lock (:class:`grader.grading.execute.GpuTurn`), or None: its
            folder is hidden from kernels and blocked by the guard, so a submission cannot take
            the lock itself and keep other students' cells from the GPU.
        uid: The job's own user (:func:`grader.grading.quota.job_user`), or 0.
        cgroup_procs: ``cgroup.procs`` files the kernel joins
            (:meth:`grader.grading.quota.JobGroup.kernel_procs`).
        kernel_view: Each checks module's real path -> the kernel's view of it
            (:func:`grader.grading.kernel_view.build`), bound over it in the sandbox.
    """

    work: Path
    submitted_root: Path
    job_dir: Path
    notebook_dir: Path
    box: Path
    sockets: Path
    options: GradingOptions
    seed_home: Path | None = None
    private_tmp: Path | None = None
    gpu_lock: Path | None = None
    uid: int = 0
    cgroup_procs: list[str] = field(default_factory=list)
    kernel_view: dict[str, str] = field(default_factory=dict)

    @property
    def start_dir(self) -> Path:
        """An empty folder the kernel starts in (read-only inside the sandbox)."""
        return self.job_dir / "start"

    @property
    def audit_fifo(self) -> Path:
        """The pipe the guard writes its records to (read by the grading process)."""
        return self.job_dir / "audit.fifo"

    @property
    def audit_log(self) -> Path:
        """Where the grading process keeps what came through :attr:`audit_fifo`."""
        return self.job_dir / "audit.jsonl"

    def protected(self) -> list[str]:
        """Folders no kernel may read: the course's answers and the instructor's data."""
        package = course.PACKAGE
        protected = {
            str(course.SOLUTIONS),
            str(course.REPO / ".git"),
            str(package / "samples"),
            str(Path(self.work).resolve()),
            str(Path(self.submitted_root).resolve()),
            str(course.WORK.resolve()),
        }
        if self.private_tmp is not None:
            protected.add(str(Path(self.private_tmp).resolve()))
        if self.gpu_lock is not None:
            protected.add(str(Path(self.gpu_lock).resolve().parent))
        return sorted(protected)

    def sandbox_settings(self, guard_file: Path) -> SandboxSettings:
        """The launcher's settings (:mod:`grader.grading.sandbox`)."""
        gpu = self.options.has_gpu
        return SandboxSettings(
            staging=str(self.box),
            cwd=str(self.start_dir),
            writable=[str(self.notebook_dir), str(self.sockets)],
            hide=[*self.protected(), *map(str, kernel_view.bytecode_folders())],
            replace=dict(self.kernel_view),
            hide_files=[str(p) for p in kernel_view.hidden_files()] if self.kernel_view else [],
            expose_read_only=[str(self.start_dir), str(self.audit_fifo)],
            memory_bytes=0 if gpu else int(self.options.memory_gb * 1e9),
            file_bytes=min(2 * 1024**3, self.disk_bytes),
            isolate=self.options.isolate,
            no_network=True,
            seed_home=str(self.seed_home) if self.seed_home else "",
            uid=self.uid,
            processes=self.options.processes,
            tmpfs_bytes=self.disk_bytes,
            cgroup_procs=list(self.cgroup_procs),
            guard_settings=str(guard_file),
        )

    @property
    def disk_bytes(self) -> int:
        """The kernel's disk quota, bytes (its folder, home, ``/tmp`` and ``/dev/shm`` in all)."""
        return int(self.options.disk_gb * 1e9)

    @property
    def guard_path(self) -> Path:
        """Where the kernel's guard reads its settings at start-up (and deletes them)."""
        return self.box / GUARD_COPY

    def disk_paths(self) -> list[str]:
        """The kernel's writable folders on the grader's disk, measured against the quota."""
        return [str(self.notebook_dir), str(self.box), str(self.sockets)]

    def guard_settings(self) -> GuardSettings:
        """The guard's settings (:mod:`grader.grading.guard`)."""
        return GuardSettings(
            assignment="",
            audit_log=str(self.audit_fifo),
            blocked=self.protected(),
            writable=[str(self.notebook_dir), str(self.box), "/tmp", "/dev/shm"],
            protected_writes=[str(course.REPO), str(Path(self.work).resolve())],
            student_dirs=[str(self.notebook_dir)],
            own_dirs=[str(self.box)],
            gpu_fraction=self.options.gpu_fraction,
            output_bytes=self.options.output_kib * 1024,
            notebook_dir=str(self.notebook_dir),
        )

    def write(self) -> tuple[Path, Path]:
        """Write the guard's and the sandbox's settings into the job folder; return their
        paths (guard, sandbox)."""
        self.start_dir.mkdir(parents=True, exist_ok=True)
        self.box.mkdir(parents=True, exist_ok=True)
        self.sockets.mkdir(parents=True, exist_ok=True)
        guard_file = self.guard_settings().write(self.job_dir / "guard.json")
        sandbox_file = self.sandbox_settings(guard_file).write(self.job_dir / "sandbox.json")
        return guard_file, sandbox_file
