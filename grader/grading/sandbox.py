"""Start a grading kernel inside a sandbox: resource limits, a private view of the file system.

nbgrader starts one Jupyter kernel per submission with the instructor's rights. The course's
grading command starts it through :class:`SandboxKernelManager`, which runs the kernel command
as ``python -m grader.grading.sandbox SETTINGS -- <kernel command>``. This module then, before the
kernel's first line runs:

* applies **resource limits** (``setrlimit``): an address-space cap when the machine grades
  on the CPU only (a runaway allocation raises ``MemoryError`` in the cell instead of
  exhausting the machine; CUDA reserves more address space than any sensible cap, so on a GPU
  machine the grading process watches memory instead: :mod:`grader.grading.execute`), a file-size cap
  and no core dumps;
* gives the kernel a **fresh home** at every start (``HOME``, IPython's profile and start-up
  folder, Jupyter's config and data folders, matplotlib's cache, Inductor's and Triton's
  caches, a copy of the class's warm compiler caches), inside the submission's staging folder,
  so nothing a submission wrote survives into a restarted kernel's start-up;
* passes on only an **allow-list of environment variables** (:data:`KEPT_ENVIRONMENT`: paths,
  locale, GPU selection, thread counts), never the grader's own (tokens, credentials), and
  starts Python in **safe-path mode without user site-packages** (``PYTHONSAFEPATH``,
  ``PYTHONNOUSERSITE``) in an empty folder, so no file in the notebook's folder is imported
  before the guard runs;
* where `bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``) is installed and
  works, runs the kernel in a **mount and PID namespace**: the whole file system read-only,
  the course's ``solutions/``, ``.git``, sample answers, the instructor's working folder
  (gradebook, other students' submissions and results) and the submissions folder hidden
  behind empty directories, except the submission's own staging folder (writable) and the one
  source notebook its checks need (read-only); a private ``/tmp`` (a course or Python
  environment installed under ``/tmp`` stays visible, read-only); every process of the
  submission ends with the kernel. Without bubblewrap the kernel runs unisolated (the report
  says so) and :mod:`grader.grading.guard` still blocks and records what it can.

:func:`bwrap_available` tells whether isolation works on this machine.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Unicode


@dataclass
class SandboxSettings:
    """What the launcher needs to know, written as JSON next to the submission.

    Attributes:
        staging: The kernel's own folder (its home for caches and settings; writable).
        cwd: Folder the kernel starts in (the autograded copy of the submission).
        writable: More folders the kernel may write to (the autograded copy).
        hide: Folders to hide behind empty directories (bubblewrap only).
        expose_read_only: Files or folders inside hidden ones to show again, read-only.
        memory_bytes: Address-space limit for the kernel and its children; 0 for none.
        file_bytes: Largest file the kernel may write.
        isolate: Use bubblewrap when it is available.
        no_network: Give the kernel a network namespace of its own (bubblewrap only; the
            kernel must then be reached over Unix sockets: ``transport = "ipc"``).
        seed_home: A folder copied into the fresh home at every start (warm caches), or "".
    """

    staging: str
    cwd: str
    writable: list[str] = field(default_factory=list)
    hide: list[str] = field(default_factory=list)
    expose_read_only: list[str] = field(default_factory=list)
    memory_bytes: int = 0
    file_bytes: int = 2 * 1024**3
    isolate: bool = True
    no_network: bool = False
    seed_home: str = ""

    def write(self, path: str | Path) -> Path:
        """Save as JSON; return the path."""
        Path(path).write_text(json.dumps(asdict(self), indent=1))
        return Path(path)

    @classmethod
    def read(cls, path: str | Path) -> SandboxSettings:
        """Load from JSON."""
        return cls(**json.loads(Path(path).read_text()))


@functools.cache
def bwrap_available() -> bool:
    """True when ``bwrap`` is on PATH and can create the namespaces and mounts this module uses
    (a container may allow user namespaces but not a fresh ``/proc``: every kernel would then
    fail to start, so such a machine grades without the sandbox and says so)."""
    exe = shutil.which("bwrap")
    if not exe:
        return False
    try:
        proc = subprocess.run(
            [
                exe,
                "--ro-bind",
                "/",
                "/",
                "--dev-bind",
                "/dev",
                "/dev",
                "--tmpfs",
                "/dev/shm",
                "--proc",
                "/proc",
                "--tmpfs",
                "/tmp",
                "--unshare-pid",
                "--unshare-net",
                "--die-with-parent",
                "true",
            ],  # fmt: skip
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def isolation_label(isolate: bool = True) -> str:
    """One phrase for reports: what the grading kernels can see."""
    if isolate and bwrap_available():
        return "bubblewrap sandbox (read-only system, course and other students hidden)"
    if isolate:
        return "NOT isolated (bubblewrap not available): kernels can read the course folder"
    return "NOT isolated (--no-sandbox): kernels can read the course folder"


#: Environment variables a grading kernel keeps from the grader's environment (all others are
#: dropped: a kernel prints what it likes into the feedback). Names ending in ``*`` are prefixes.
KEPT_ENVIRONMENT = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TERM",
    "USER",
    "LOGNAME",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "CUDA_HOME",
    "CUDA_PATH",
    "CC",
    "CXX",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "GPU_COURSE_AUTOGRADE",
    "GPU_COURSE_DATA",
    "JPY_SESSION_NAME",
    "JPY_PARENT_PID",
)


def _kept(name: str) -> bool:
    return any(name.startswith(k[:-1]) if k.endswith("*") else name == k for k in KEPT_ENVIRONMENT)


def fresh_home(settings: SandboxSettings) -> Path:
    """Make the kernel's home anew (emptied, then the warm caches copied in); return it."""
    home = Path(settings.staging) / "home"
    if home.exists():
        shutil.rmtree(home, ignore_errors=True)
    if settings.seed_home and Path(settings.seed_home).is_dir():
        shutil.copytree(settings.seed_home, home, symlinks=False, dirs_exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    return home


def kernel_environment(settings: SandboxSettings, parent: dict | None = None) -> dict[str, str]:
    """The kernel's whole environment: the allow-listed variables of ``parent`` (default: this
    process's), a home in the staging folder and every tool's folders inside it, Python's
    safe-path mode and no user site-packages."""
    parent = dict(os.environ if parent is None else parent)
    home = Path(settings.staging) / "home"
    dirs = {
        "HOME": home,
        "IPYTHONDIR": home / ".ipython",
        "JUPYTER_CONFIG_DIR": home / ".jupyter",
        "JUPYTER_DATA_DIR": home / ".local" / "share" / "jupyter",
        "JUPYTER_RUNTIME_DIR": home / ".local" / "share" / "jupyter" / "runtime",
        "MPLCONFIGDIR": home / ".config" / "matplotlib",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_CONFIG_HOME": home / ".config",
        "TORCHINDUCTOR_CACHE_DIR": home / ".cache" / "torchinductor",
        "TRITON_CACHE_DIR": home / ".cache" / "triton",
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in parent.items() if _kept(k)}
    env.update({k: str(v) for k, v in dirs.items()})
    env.update({"PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    env.setdefault("PATH", os.defpath)
    return env


def software_under_tmp() -> list[str]:
    """Folders under ``/tmp`` that the kernel needs to start: the Python environment, the
    course (for ``grader``) and every ``sys.path`` entry (a course cloned into ``/tmp``, as on
    some CI runners). The sandbox gives the kernel a private, empty ``/tmp``; these are bound
    back read-only, before the course's protected folders are hidden again."""
    tmp = Path("/tmp").resolve()
    found: set[Path] = set()
    candidates = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        str(Path(__file__).resolve().parents[2]),  # the repository: grader/grading/sandbox.py
        *sys.path,
        *os.environ.get("PYTHONPATH", "").split(os.pathsep),
    ]
    for entry in candidates:
        if not entry:
            continue
        path = Path(entry).resolve()
        if path != tmp and tmp in path.parents and path.exists():
            found.add(path)
    # keep the outermost folders only: binding a parent already shows its children
    outer = sorted(p for p in found if not any(q in p.parents for q in found))
    return [str(p) for p in outer]


def bwrap_command(settings: SandboxSettings, command: list[str]) -> list[str]:
    """The bubblewrap command line that runs ``command`` as described in the module docstring."""
    args = [
        shutil.which("bwrap") or "bwrap",
        "--ro-bind", "/", "/",
        "--dev-bind", "/dev", "/dev",  # GPUs (/dev/nvidia*) and /dev/shm for DataLoader workers
        "--tmpfs", "/dev/shm",  # a private one: DataLoader workers share memory through it
        "--proc", "/proc",
        "--tmpfs", "/tmp",
    ]  # fmt: skip
    for path in software_under_tmp():  # a course or Python installed under /tmp stays visible
        args += ["--ro-bind", path, path]
    for path in settings.hide:
        if Path(path).is_dir():
            args += ["--tmpfs", path]
        elif Path(path).exists():  # a file (a git worktree's .git): an empty file in its place
            args += ["--ro-bind", "/dev/null", path]
    exposed = list(settings.expose_read_only)
    if "-f" in command[:-1]:  # the kernel's connection file (often in /tmp, hidden above)
        exposed.append(command[command.index("-f") + 1])
    for path in exposed:
        if Path(path).exists():
            args += ["--ro-bind", path, path]
    for path in [settings.staging, *settings.writable]:
        args += ["--bind", path, path]
    args += [
        "--chdir", settings.cwd,
        "--unshare-pid",
        "--die-with-parent",
    ]  # fmt: skip
    if settings.no_network:
        args.append("--unshare-net")
    return [*args, "--", *command]


def _apply_limits(settings: SandboxSettings) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if settings.file_bytes:
        resource.setrlimit(resource.RLIMIT_FSIZE, (settings.file_bytes, settings.file_bytes))
    if settings.memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (settings.memory_bytes, settings.memory_bytes))


def launch(settings_path: str, command: list[str]) -> None:
    """Apply the limits and environment, then replace this process with the kernel
    (inside bubblewrap when asked and available). Does not return."""
    settings = SandboxSettings.read(settings_path)
    fresh_home(settings)
    env = kernel_environment(settings)
    _apply_limits(settings)
    if settings.isolate and bwrap_available():
        # In the new PID namespace the kernel's parent has pid 1, which ipykernel reads as
        # "my parent died"; bubblewrap's --die-with-parent ends the kernel with the grader.
        env.pop("JPY_PARENT_PID", None)
        # Jupyter interrupts a kernel by sending SIGINT to its process group, bwrap included:
        # bwrap must survive it (the kernel installs its own handler while a cell runs).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        command = bwrap_command(settings, command)
    else:
        Path(settings.cwd).mkdir(parents=True, exist_ok=True)
        os.chdir(settings.cwd)
    os.execvpe(command[0], command, env)


class SandboxKernelManager(AsyncKernelManager):
    """A kernel manager that starts the kernel through :func:`launch`.

    Set :attr:`sandbox_settings` to the path of a :class:`SandboxSettings` JSON file.
    """

    sandbox_settings = Unicode("", help="Path of the SandboxSettings JSON file").tag(config=True)

    def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
        """The kernel command, prefixed with the sandbox launcher."""
        cmd = super().format_kernel_cmd(extra_arguments)
        if not self.sandbox_settings:
            return cmd
        return [sys.executable, "-m", "grader.grading.sandbox", self.sandbox_settings, "--", *cmd]


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print(
            "usage: python -m grader.grading.sandbox SETTINGS.json -- KERNEL COMMAND...",
            file=sys.stderr,
        )
        sys.exit(2)
    launch(sys.argv[1], sys.argv[3:])
