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
  works, runs the kernel in a sandbox built from an **allow-list**: an empty root holding,
  read-only, only the system folders (:data:`SYSTEM_PATHS`), the Python environment and the
  course (:func:`python_environment`), with the course's ``solutions/``, ``.git``, sample
  answers, the instructor's working folder (gradebook, other students' submissions and
  results) and the submissions folder hidden behind empty directories; writable, only the
  submission's own folders (its home, the graded notebook's folder, its sockets); a private
  ``/tmp`` and ``/dev/shm``; its own mount, PID, IPC and network namespaces. Nothing else
  (``/home``, ``/root``, ``/var``, ``/opt``, ...) exists there, and every process of the
  submission ends with the kernel;
* **never with the grader's privileges**: when the grader is root, bubblewrap sets the sandbox
  up as root, then the kernel's user and groups are dropped to ``nobody``
  (:func:`kernel_ids`) before a second bubblewrap gives the kernel a **user namespace of its
  own** (no capabilities, no further user namespaces), so files only root may read (such as
  ``/etc/shadow``) stay unreadable. The kernel's own folders and files (its home, the graded
  notebook's folder, its socket folder, the connection file, the guard's settings and pipe)
  are given to that user (:func:`grant`); nothing else changes owner. When the grader is not
  root, the kernel runs as the grader's user in a user namespace of its own and sees only
  the allow-list above. Without bubblewrap the kernel runs unisolated with the grader's
  rights (the report says so; ``python -m grader autograde`` refuses that as root unless told
  ``--allow-root-unsandboxed``) and :mod:`grader.grading.guard` still blocks and records what
  it can.

:func:`bwrap_available` tells whether isolation works on this machine.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Unicode

from grader.grading import quota


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
        uid: The job's own user (:func:`grader.grading.quota.job_user`) the kernel runs as
            when the grader is root; 0 for ``nobody`` (:func:`kernel_ids`).
        processes: Processes and threads the kernel's user may have at once
            (``RLIMIT_NPROC``; applied only with a job user of its own, 0 for no limit).
        tmpfs_bytes: Size of the sandbox's private ``/tmp`` and ``/dev/shm`` each (0: the
            tmpfs default, half the memory).
        cgroup_procs: ``cgroup.procs`` files the launcher joins before the kernel starts
            (:class:`grader.grading.quota.JobGroup`).
        replace: Files shown in place of others, read-only: real path -> the file shown there
            (the kernel's view of each checks module: :mod:`grader.grading.kernel_view`).
        hide_files: Files shown empty (bubblewrap only).
        guard_settings: The guard's settings, copied at every start to :data:`GUARD_COPY` in the
            kernel's staging folder, where the guard reads and deletes it (so no process the
            kernel starts later can read the instructor's paths it names); "" for none.
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
    uid: int = 0
    processes: int = 0
    tmpfs_bytes: int = 0
    cgroup_procs: list[str] = field(default_factory=list)
    replace: dict[str, str] = field(default_factory=dict)
    hide_files: list[str] = field(default_factory=list)
    guard_settings: str = ""

    def write(self, path: str | Path) -> Path:
        """Save as JSON; return the path."""
        Path(path).write_text(json.dumps(asdict(self), indent=1))
        return Path(path)

    @property
    def guard_copy(self) -> Path:
        """Where the kernel finds its guard's settings (see :attr:`guard_settings`)."""
        return Path(self.staging) / GUARD_COPY

    @classmethod
    def read(cls, path: str | Path) -> SandboxSettings:
        """Load from JSON."""
        return cls(**json.loads(Path(path).read_text()))


#: Name of the guard's settings in the kernel's staging folder (read and deleted by the guard).
GUARD_COPY = "guard.json"

#: System folders every kernel sees, read-only (where they exist): programs, libraries, their
#: configuration (``/etc``: the files only root may read stay unreadable to the kernel's user)
#: and ``/sys`` (CPU and GPU topology, read by torch and the CUDA driver).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")

#: Environment variables naming folders a kernel reads (kept by :data:`KEPT_ENVIRONMENT`):
#: shown read-only when they exist.
PATH_VARIABLES = ("PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "GPU_COURSE_DATA")

#: Run inside the sandbox as root, before the kernel: drop to the kernel's user and groups,
#: then run the rest of the command (``python -I -S``: no site, no environment, no script
#: folder on ``sys.path``, so nothing but the standard library runs with root's rights).
_DROP = (
    "import os, sys; u, g = int(sys.argv[1]), int(sys.argv[2]); os.setgroups([]); "
    "os.setresgid(g, g, g); os.setresuid(u, u, u); os.execv(sys.argv[3], sys.argv[3:])"
)


def kernel_ids(settings: SandboxSettings | None = None) -> tuple[int, int] | None:
    """The user and group a sandboxed kernel runs as when the grader is root: the job's own
    (``settings.uid``, :func:`grader.grading.quota.job_user`) when it has one, else
    ``nobody``'s (65534 where the system has no such user); None when the grader is not root
    (the kernel then keeps the grader's user, in a user namespace of its own)."""
    if os.geteuid() != 0:
        return None
    if settings is not None and settings.uid > 0:
        return settings.uid, settings.uid
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return 65534, 65534
    if entry.pw_uid == 0 or entry.pw_gid == 0:  # a broken passwd file: never root
        return 65534, 65534
    return entry.pw_uid, entry.pw_gid


@dataclass(frozen=True)
class Features:
    """What bubblewrap can do on this machine (see :func:`features`).

    Attributes:
        user_namespace: The kernel gets a user namespace of its own (unprivileged user
            namespaces are allowed here).
        disable_userns: bubblewrap can forbid further user namespaces inside (0.8 or newer).
    """

    user_namespace: bool
    disable_userns: bool


@functools.cache
def features() -> Features | None:
    """How the sandbox can be built here, or None when bubblewrap is missing or cannot create
    the namespaces and mounts this module uses (a container may allow user namespaces but not
    a fresh ``/proc``: every kernel would then fail to start, so such a machine grades without
    the sandbox and says so). Tries the strongest form first: a user namespace of the kernel's
    own with no further user namespaces, then without that restriction, then (as root only)
    the dropped user without a user namespace of its own."""
    if not shutil.which("bwrap"):
        return None
    candidates = [Features(True, True), Features(True, False)]
    if os.geteuid() == 0:
        candidates.append(Features(False, False))
    true = shutil.which("true") or "/bin/true"
    with tempfile.TemporaryDirectory(prefix="bwrap-probe-") as tmp:
        os.chmod(tmp, 0o755)  # the kernel's user must reach it
        probe = SandboxSettings(staging=tmp, cwd=tmp, no_network=True)
        for candidate in candidates:
            try:
                proc = subprocess.run(
                    bwrap_command(probe, [true], candidate), capture_output=True, timeout=60
                )
            except (OSError, subprocess.TimeoutExpired):
                continue
            if proc.returncode == 0:
                return candidate
    return None


def bwrap_available() -> bool:
    """True when the bubblewrap sandbox works on this machine (see :func:`features`)."""
    return features() is not None


def isolation_label(isolate: bool = True) -> str:
    """One phrase for reports: what the grading kernels can see, and as whom they run."""
    found = features() if isolate else None
    if found is not None:
        who = (
            f"a user of each job's own (uids from {quota.UID_BASE})"
            if os.geteuid() == 0
            else f"this user (uid {os.geteuid()})"
        )
        where = (
            "in a user namespace of its own"
            if found.user_namespace
            else "without a user namespace of its own"
        )
        return (
            f"bubblewrap sandbox (kernels run as {who} {where}; they see only the system "
            "folders, the Python environment, the course with its answers hidden, and their "
            "own folders)"
        )
    root = " AS ROOT" if os.geteuid() == 0 else ""
    if isolate:
        return (
            f"NOT isolated (bubblewrap not available): kernels run{root} with the grader's "
            "rights and can read the course folder"
        )
    return f"NOT isolated (--no-sandbox): kernels run{root} with the grader's rights and can read the course folder"


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
    """Make the kernel's home anew (emptied, then the warm caches copied in, Triton's made to
    point at the copy: :func:`relocate_triton_cache`); return it."""
    home = Path(settings.staging) / "home"
    if home.exists():
        shutil.rmtree(home, ignore_errors=True)
    if settings.seed_home and Path(settings.seed_home).is_dir():
        shutil.copytree(settings.seed_home, home, symlinks=False, dirs_exist_ok=True)
        relocate_triton_cache(
            Path(settings.seed_home) / ".cache" / "triton", home / ".cache" / "triton"
        )
    home.mkdir(parents=True, exist_ok=True)
    return home


def relocate_triton_cache(old: Path, new: Path) -> int:
    """Make a copy of Triton's cache at ``new`` (of the one at ``old``) read back by Triton.

    Triton keeps, beside each compiled kernel, a group file (``__grp__<kernel>.json``) that
    names the kernel's files by absolute path (``triton/runtime/cache.py``,
    ``FileCacheManager.put_group``); a copied cache still names the original's files, which a
    sandboxed kernel cannot see, so every kernel would be compiled again. The paths under
    ``old`` are rewritten to the same files under ``new``; other paths are left as they are.

    Returns:
        The number of group files rewritten (0 where ``new`` is not a folder).
    """
    old_root, rewritten = str(old), 0
    if not new.is_dir():
        return 0
    for group_file in new.glob("*/__grp__*.json"):
        try:
            group = json.loads(group_file.read_text())
            paths = group["child_paths"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not Triton's layout: left for Triton to ignore
        if not isinstance(paths, dict):
            continue
        moved = {
            name: str(new / Path(path).relative_to(old_root))
            if isinstance(path, str) and Path(path).is_relative_to(old_root)
            else path
            for name, path in paths.items()
        }
        if moved != paths:
            group["child_paths"] = moved
            group_file.write_text(json.dumps(group))
            rewritten += 1
    return rewritten


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


#: Folders the sandbox makes its own (private, or fresh): never bound from outside.
_OWN = ("/tmp", "/dev/shm", "/proc")


def _outermost(paths) -> list[Path]:
    """The paths that are not inside another one of them (binding a folder shows its children)."""
    found = {Path(p) for p in paths}
    return sorted(p for p in found if not any(q in p.parents for q in found))


def python_environment(command: list[str] | None = None) -> list[str]:
    """The folders a kernel needs from outside the system folders, as real paths: the Python
    environment (this interpreter's prefixes and every ``sys.path`` entry; the base
    installation of a virtual environment too, wherever it lives, e.g. in a home folder only
    root may enter), the course (for ``grader``), the folders named by :data:`PATH_VARIABLES`,
    and the installation of the kernel command's interpreter. Outermost folders only."""
    repo = Path(__file__).resolve().parents[2]  # grader/grading/sandbox.py
    here = os.getcwd()
    env_paths = [
        entry for name in PATH_VARIABLES for entry in os.environ.get(name, "").split(os.pathsep)
    ]
    candidates = [
        sys.prefix,
        sys.exec_prefix,
        sys.base_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        str(repo),
        *(p for p in sys.path if p and (p != here or p in env_paths)),  # not `-m`'s folder
        *env_paths,
    ]
    if command and os.path.basename(command[0]).startswith("python"):
        exe = shutil.which(command[0]) or command[0]
        candidates.append(str(Path(os.path.realpath(exe)).parent.parent))
    found = []
    for entry in candidates:
        if not entry or not os.path.isabs(entry):
            continue
        path = Path(os.path.realpath(entry))
        # never the root or a folder the sandbox makes its own (a script run from /tmp)
        if path.exists() and not any(path == Path(m) or path in Path(m).parents for m in _OWN):
            found.append(path)
    return [str(p) for p in _outermost(found)]


def software_under_tmp() -> list[str]:
    """The folders of :func:`python_environment` that lie under ``/tmp`` (a course or Python
    environment cloned there, as on some CI runners): the sandbox's ``/tmp`` is private, and
    these are bound into it read-only."""
    tmp = Path("/tmp").resolve()
    return [p for p in python_environment() if tmp in Path(p).parents]


def _links_on_the_way(path: str) -> list[tuple[str, str]]:
    """``(link, target)`` for each symbolic link met while resolving ``path`` (a virtual
    environment's ``bin/python``, a ``.venv`` link to a shared environment)."""
    out: list[tuple[str, str]] = []
    todo = list(Path(os.path.abspath(path)).parts[1:])
    current = Path("/")
    for _ in range(256):  # a bound on link loops
        if not todo:
            break
        step = current / todo.pop(0)
        if step.is_symlink():
            target = os.readlink(step)
            out.append((str(step), target))
            resolved = Path(os.path.normpath(current / target))
            todo = list(resolved.parts[1:]) + todo
            current = Path("/")
        else:
            current = step
    return out


class _Layout:
    """The bubblewrap arguments that build a root file system from nothing, one mount at a
    time, creating each mount point's missing parent folders world-readable (bubblewrap
    would copy the modes of the real parents, and a parent only root may enter, such as
    ``/root``, would hide what is bound under it from the kernel's user)."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self._mounts: list[tuple[Path, bool]] = []  # (mount point, holds the real files)
        self._made: set[Path] = set()

    def _backing(self, path: Path) -> tuple[Path, bool] | None:
        """The innermost mount that holds ``path``."""
        best = None
        for point, real in self._mounts:
            if (point == path or point in path.parents) and (
                best is None or len(point.parts) > len(best[0].parts)
            ):
                best = (point, real)
        return best

    def exists(self, path: Path) -> bool:
        """Whether ``path`` will exist in the sandbox as it does outside (under a bind)."""
        backing = self._backing(path)
        return backing is not None and backing[1]

    def shown(self, path: Path) -> bool:
        """Whether ``path`` lies under something mounted (bound, or an empty folder)."""
        return self._backing(path) is not None

    def _parents(self, dest: Path) -> None:
        for parent in reversed(dest.parents):
            if parent == Path("/") or parent in self._made:
                continue
            backing = self._backing(parent)
            if backing is not None and (backing[1] or backing[0] == parent):
                continue  # a real folder under a bind, or a mount point itself
            self.args += ["--perms", "0755", "--dir", str(parent)]
            self._made.add(parent)

    def bind(self, option: str, src: str, dest: str) -> None:
        dest_path = Path(dest)
        self._parents(dest_path)
        self.args += [option, src, dest]
        self._mounts.append((dest_path, True))

    def empty(self, dest: str, perms: str = "0755", size: int = 0) -> None:
        dest_path = Path(dest)
        self._parents(dest_path)
        self.args += ["--perms", perms, *(["--size", str(size)] if size else []), "--tmpfs", dest]
        self._mounts.append((dest_path, False))

    def symlink(self, target: str, dest: str) -> None:
        dest_path = Path(dest)
        if self.exists(dest_path) or dest_path in self._made:
            return
        self._parents(dest_path)
        self.args += ["--symlink", target, dest]
        self._made.add(dest_path)


def bwrap_command(
    settings: SandboxSettings, command: list[str], found: Features | None = None
) -> list[str]:
    """The bubblewrap command line that runs ``command`` as described in the module docstring.

    Args:
        settings: The kernel's folders and what to hide.
        command: The command to run in the sandbox (the kernel's).
        found: The sandbox's form (default: :func:`features`, the strongest that works here).
    """
    found = found or features() or Features(True, False)
    bwrap = shutil.which("bwrap") or "bwrap"
    ids = kernel_ids(settings)
    layout = _Layout()
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            layout.symlink(os.readlink(path), path)  # /lib -> usr/lib on a merged /usr
        elif os.path.isdir(path):
            layout.bind("--ro-bind", path, path)
    layout.bind("--dev-bind", "/dev", "/dev")  # GPUs (/dev/nvidia*), /dev/null, /dev/urandom
    # private ones, of the job's disk quota each: DataLoader workers share memory through /dev/shm
    layout.empty("/dev/shm", "1777", settings.tmpfs_bytes)
    layout.args += ["--proc", "/proc"]
    layout.empty("/tmp", "1777", settings.tmpfs_bytes)
    software = python_environment(command)
    for path in software:
        if not layout.exists(Path(path)):
            layout.bind("--ro-bind", path, path)
    for path in settings.hide:  # the course's answers, the instructor's data
        if layout.exists(Path(path)):
            if Path(path).is_dir():
                layout.empty(path)
            elif Path(path).exists():  # a file (a git worktree's .git): an empty file instead
                layout.bind("--ro-bind", "/dev/null", path)
    for path, shown in settings.replace.items():  # the checks as the kernel may see them
        if layout.exists(Path(path)) and Path(shown).is_file():
            layout.bind("--ro-bind", shown, path)
    for path in settings.hide_files:
        if layout.exists(Path(path)) and Path(path).is_file():
            layout.bind("--ro-bind", "/dev/null", path)
    # the paths the kernel is started by, as written (a virtual environment's links)
    wanted = [command[0], sys.executable, sys.prefix, *(p for p in sys.path if p)]
    for path in wanted:
        if os.path.isabs(path):
            for link, target in _links_on_the_way(path):
                layout.symlink(target, link)
    exposed = list(settings.expose_read_only)
    connection = _connection_file(command)
    if connection:  # the kernel's connection file (often in /tmp, hidden above)
        exposed.append(connection)
    for path in exposed:
        if Path(path).exists():
            layout.bind("--ro-bind", path, path)
    for path in [settings.staging, *settings.writable]:
        layout.bind("--bind", path, path)
    layout.args += ["--remount-ro", "/", "--chdir", settings.cwd]
    layout.args += ["--unshare-pid", "--unshare-ipc", "--die-with-parent"]
    if settings.no_network:
        layout.args.append("--unshare-net")
    inner = [*command]
    if ids is None:  # not root: this bubblewrap gives the kernel its user namespace
        userns = ["--unshare-user", *(["--disable-userns"] if found.disable_userns else [])]
        return [bwrap, *layout.args, *userns, "--", *inner]
    # root: set up as root, drop to the kernel's user, then a user namespace of its own
    if found.user_namespace:
        inner = [
            bwrap, "--unshare-user", *(["--disable-userns"] if found.disable_userns else []),
            "--dev-bind", "/", "/", "--chdir", settings.cwd, "--die-with-parent", "--", *inner,
        ]  # fmt: skip
    drop = [os.path.realpath(sys.executable), "-I", "-S", "-c", _DROP, str(ids[0]), str(ids[1])]
    caps = ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    inner[0] = shutil.which(inner[0]) or inner[0]  # the drop runs it by its path
    return [bwrap, *layout.args, *caps, "--", *drop, *inner]


def _connection_file(command: list[str]) -> str:
    """The kernel's connection file (``-f PATH`` in its command), or ""."""
    if "-f" in command[:-1]:
        return command[command.index("-f") + 1]
    return ""


def grant(settings: SandboxSettings, command: list[str]) -> None:
    """Give the kernel's user (:func:`kernel_ids`, when the grader is root) what the kernel
    must write or read there: its home and staging folder (everything in them), the folders
    it writes (the graded notebook's folder, its sockets; not what they hold), and its own
    files shown read-only (the guard's settings and pipe, its start folder, the connection
    file). Nothing else changes owner. Does nothing when the grader is not root."""
    ids = kernel_ids(settings)
    if ids is None:
        return
    uid, gid = ids
    for root, dirs, files in os.walk(settings.staging):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)
    own = [settings.staging, *settings.writable, *settings.expose_read_only]
    connection = _connection_file(command)
    if connection:
        own.append(connection)
    for path in own:
        if os.path.lexists(path) and not os.path.islink(path):
            os.chown(path, uid, gid)


def _apply_limits(settings: SandboxSettings, own_user: bool = False) -> None:
    """The kernel's rlimits (inherited by everything it starts): no core dumps, the largest
    file, the address space (CPU grading), and, when the kernel runs as a user of the job's
    own (``own_user``), its processes and threads (``RLIMIT_NPROC`` counts per user: for a
    shared user it would count every job's)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if settings.file_bytes:
        resource.setrlimit(resource.RLIMIT_FSIZE, (settings.file_bytes, settings.file_bytes))
    if settings.memory_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (settings.memory_bytes, settings.memory_bytes))
    if own_user and settings.processes:
        resource.setrlimit(resource.RLIMIT_NPROC, (settings.processes, settings.processes))


def _copy_guard_settings(settings: SandboxSettings) -> None:
    """Put the guard's settings where the kernel reads (and deletes) them, readable by the
    kernel's user only."""
    if not settings.guard_settings:
        return
    copy = settings.guard_copy
    copy.unlink(missing_ok=True)
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(Path(settings.guard_settings).read_bytes())


def _exec_with_args_fd(command: list[str], env: dict[str, str]) -> None:
    """Exec bubblewrap with its options passed through a file descriptor (``--args FD``), so
    that the sandbox's ``/proc/1/cmdline`` (bubblewrap's own command line, readable by every
    process inside) shows no path of the instructor's: only ``bwrap --args N -- <kernel>``."""
    split = command.index("--")
    options, rest = command[1:split], command[split:]
    read_fd, write_fd = os.pipe()
    data = b"".join(os.fsencode(a) + b"\0" for a in options)
    if len(data) > 60000:  # more than a pipe holds before a reader: keep it on the command line
        os.close(read_fd)
        os.close(write_fd)
        os.execvpe(command[0], command, env)
    os.write(write_fd, data)
    os.close(write_fd)
    os.set_inheritable(read_fd, True)
    os.execvpe(command[0], [command[0], "--args", str(read_fd), *rest], env)


def launch(settings_path: str, command: list[str]) -> None:
    """Apply the limits and environment, then replace this process with the kernel
    (inside bubblewrap when asked and available, as :func:`kernel_ids`' user when the grader
    is root). Does not return."""
    settings = SandboxSettings.read(settings_path)
    for problem in quota.join_groups(settings.cgroup_procs):
        print(f"sandbox: control group not joined: {problem}", file=sys.stderr)
    fresh_home(settings)
    _copy_guard_settings(settings)
    env = kernel_environment(settings)
    isolated = settings.isolate and bwrap_available()
    _apply_limits(settings, own_user=isolated and settings.uid > 0 and os.geteuid() == 0)
    if isolated:
        # In the new PID namespace the kernel's parent has pid 1, which ipykernel reads as
        # "my parent died"; bubblewrap's --die-with-parent ends the kernel with the grader.
        env.pop("JPY_PARENT_PID", None)
        ids = kernel_ids(settings)
        if ids is not None:
            grant(settings, command)
            try:
                name = pwd.getpwuid(ids[0]).pw_name
            except KeyError:
                name = str(ids[0])
            env["USER"] = env["LOGNAME"] = name
        # Jupyter interrupts a kernel by sending SIGINT to its process group, bwrap included:
        # bwrap must survive it (the kernel installs its own handler while a cell runs).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _exec_with_args_fd(bwrap_command(settings, command), env)
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
