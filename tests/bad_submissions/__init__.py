"""Bad submissions of 03_streams, graded by ``python -m grader autograde`` in tests/test_grading.py.

Each case is a student: how their notebook differs from the reference submission, and what
the grading report must say about them. Exercises of 03_streams: ``prefetch_to_device``
(4 points on the CPU) and ``run_on_streams`` (3 points on the CPU); their CUDA cells (2 + 2)
score 0 on a machine without a GPU for everyone. A case breaks one exercise (or the kernel)
so that the *other* exercise shows whether grading went on after the damage.

Fields of :class:`Case`:
    code: grade id -> code of a solution cell (the other cells hold the reference);
        ``{reference}`` in it stands for the reference code of that cell.
    edit: how else the notebook is changed (``delete_tests``, ``edit_tests``, ``rename``,
        ``missing``, ``notebook_link``, ``notebook_folder``, ``invalid_schema``,
        ``invalid_notebook``) or None.
    folder: the student's folder name (default: the case's name).
    files: other entries of the submission folder: name -> text, bytes, or ``LINK + target``
        for a symbolic link.
    tamper: a function applied to the notebook (nbformat node) before it is written.
    raw: bytes written as the notebook file instead of a notebook.
    exercises: the exercises that must still score full marks (``prefetch``, ``streams``);
        the others score 0.
    status: ``graded`` or ``missing``.
    review: whether the submission must be flagged for manual review.
    says: words the report's notes or review reasons must contain (case-insensitive).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

#: Points per exercise on a machine without a GPU, and with one (CUDA cells included).
POINTS = {"prefetch": (4, 6), "streams": (3, 5)}

#: Wrong but harmless answers: an exercise a tampering case tries to pass without solving.
WRONG_STREAMS = """
def run_on_streams(fns):
    return []  # wrong: no results
"""

#: In a case's code, replaced by the reference solution of that cell.
REFERENCE = "{reference}"
#: In a case's files, a value starting with this is a symbolic link to the rest.
LINK = "link:"
#: Put in the grading command's environment by the test: it must never reach a kernel.
SECRET = "course-secret-3f9a2c7e"

#: Start-up files a submission writes, each replacing the grader's request handler, then the
#: kernel is ended so that a fresh one starts (and would run them).
FORGE_START_UP = """import os
import pathlib
import sys

FORGE = "import grader.runtime.remote\\ngrader.runtime.remote.serve = lambda *a, **k: None\\n"
home = pathlib.Path.home()
ipy = pathlib.Path(os.environ.get("IPYTHONDIR", home / ".ipython"))
version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
targets = [
    ipy / "profile_default" / "startup" / "00-forge.py",
    home / ".ipython" / "profile_default" / "startup" / "00-forge.py",
    home / ".jupyter" / "jupyter_config.py",
    home / ".local" / "lib" / version / "site-packages" / "usercustomize.py",
    pathlib.Path.cwd() / "ipykernel_launcher.py",
    pathlib.Path.cwd() / "sitecustomize.py",
    pathlib.Path("/tmp") / "sitecustomize.py",
]
for target in targets:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(FORGE)
    except OSError as e:
        print("refused", e)
os._exit(1)
"""


#: The prefetch cell's extra code in ``reads_system_secrets``: it prints the kernel's user and
#: everything it can read of /etc/shadow, every home folder (/home, /root, the password file's
#: homes) and the grader's home, so that tests/test_grading.py can check that none of it (nor
#: the secrets the test plants there) reaches the graded notebook or the feedback.
READ_SYSTEM_SECRETS = """
import os
import pwd


def _show(path):
    try:
        with open(path, "rb") as f:
            print("READ", path, f.read(300))
    except OSError as e:
        print("refused", path, type(e).__name__)


print("uid", os.getuid(), "gid", os.getgid())
_show("/etc/shadow")
_show("/etc/gshadow")
_homes = {"/home", "/root", os.path.expanduser("~root")}
_homes |= {p.pw_dir for p in pwd.getpwall() if p.pw_dir.startswith(("/home/", "/root"))}
_seen = 0
for _home in sorted(_homes):
    for _root, _dirs, _files in os.walk(_home, onerror=lambda e: print("refused", e.filename)):
        for _name in _files:
            _seen += 1
            if _seen < 200:
                _show(os.path.join(_root, _name))
"""


@dataclass
class Case:
    name: str
    what: str
    code: dict[str, str] = field(default_factory=dict)
    edit: str | None = None
    exercises: tuple[str, ...] = ("prefetch", "streams")
    status: str = "graded"
    review: bool = False
    says: tuple[str, ...] = ()
    folder: str | None = None
    files: dict = field(default_factory=dict)
    tamper: Callable | None = None
    raw: bytes | None = None

    @property
    def student(self) -> str:
        """The student's folder name."""
        return self.folder or self.name


def _cells_with(grade_id: str):
    def pick(nb):
        return [
            c
            for c in nb.cells
            if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id
        ]

    return pick


def _raise_points(nb):
    for cell in _cells_with("test_run_on_streams")(nb):
        cell.metadata["nbgrader"]["points"] = 100


def _rename_test(nb):
    for cell in _cells_with("test_run_on_streams")(nb):
        cell.metadata["nbgrader"]["grade_id"] = "my_own_cell"
        cell.source = "print('OK: I graded myself')"


def _remark_test_as_solution(nb):
    for cell in _cells_with("test_run_on_streams")(nb):
        cell.metadata["nbgrader"].update(grade=False, solution=True, locked=False)
        cell.source = "pass"


def _duplicate_answer(nb):
    import copy

    cell = _cells_with("run_on_streams")(nb)[0]
    twin = copy.deepcopy(cell)
    twin["id"] = "twin-cell"
    twin.source = "def run_on_streams(fns):\n    return []\n"
    nb.cells.insert(nb.cells.index(cell), twin)


CASES = [
    # ---------------------------------------------------------------- honest, but broken
    Case(
        "infinite_loop",
        "run_on_streams never returns: the test cell is interrupted at the cell timeout",
        code={"run_on_streams": "def run_on_streams(fns):\n    while True:\n        pass\n"},
        exercises=("prefetch",),
        says=("timed out",),
    ),
    Case(
        "ignores_interrupt",
        "run_on_streams ignores SIGINT and loops: the kernel is killed and restarted",
        code={
            "run_on_streams": "import signal\n\n\ndef run_on_streams(fns):\n"
            "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n    while True:\n        pass\n"
        },
        exercises=("prefetch",),
        says=("did not stop when interrupted",),
    ),
    Case(
        "os_exit",
        "the run_on_streams cell calls os._exit: the kernel dies, prefetch is still graded",
        code={"run_on_streams": REFERENCE + "\nimport os\n\nos._exit(3)\n"},
        exercises=("prefetch",),
        says=("exited with status 3",),
    ),
    Case(
        "segfault",
        "the prefetch cell dereferences NULL through ctypes: SIGSEGV, run_on_streams still graded",
        code={
            "prefetch_to_device": "import ctypes\n\nctypes.string_at(0)\n",
        },
        exercises=("streams",),
        review=True,  # ctypes is recorded: it can reach anything in the process
        says=("segmentation fault",),
    ),
    Case(
        "runaway_memory",
        "run_on_streams allocates without end: the memory limit stops it in that cell",
        code={
            "run_on_streams": "def run_on_streams(fns):\n    hog = []\n    while True:\n"
            "        hog.append(bytearray(200 * 2**20))\n"
        },
        exercises=("prefetch",),
        says=("ran out of its memory limit (6 GB): MemoryError",),
    ),
    Case(
        "torch_memory_hog",
        "the prefetch cell allocates torch tensors until the memory limit refuses one (torch "
        "raises RuntimeError): the report names the memory limit, grading goes on",
        code={
            "prefetch_to_device": REFERENCE + "\nimport torch\n\n\ndef _hog():\n    hog = []\n"
            "    while True:\n        hog.append(torch.empty(2**28))\n\n\n_hog()\n"
        },
        says=("prefetch_to_device: ran out of its memory limit (6 GB): RuntimeError",),
    ),
    Case(
        "enormous_output",
        "the prefetch cell prints 60 MB: the output is cut, grading goes on",
        code={
            "prefetch_to_device": "for _ in range(60_000):\n    print('x' * 1000)\n\n" + REFERENCE
        },
        says=("output truncated",),
    ),
    Case(
        "syntax_error",
        "run_on_streams does not parse",
        code={"run_on_streams": "def run_on_streams(fns)\n    return [f() for f in fns]\n"},
        exercises=("prefetch",),
    ),
    Case(
        "deleted_test_cells",
        "the student deleted both visible test cells: they are put back",
        edit="delete_tests",
        says=("deleted cells restored",),
    ),
    Case(
        "edited_test_cell",
        "the student replaced a test cell with `pass` and answered wrong: the test is restored",
        code={"run_on_streams": WRONG_STREAMS},
        edit="edit_tests",
        exercises=("prefetch",),
        says=("edited course cells restored",),
    ),
    Case(
        "renamed_notebook",
        "the notebook was saved as '03_streams-Copy1.ipynb'",
        edit="rename",
        says=("03_streams-Copy1.ipynb",),
    ),
    Case(
        "missing_notebook",
        "the assignment folder holds no notebook",
        edit="missing",
        exercises=(),
        status="missing",
        says=("no notebook",),
    ),
    # ---------------------------------------------------------------- tampering
    Case(
        "patch_check",
        "a wrong answer, and the grader's check replaced by one that always passes (the check "
        "runs in the grading process, and the kernel's view of the checks module holds no check)",
        code={
            "run_on_streams": WRONG_STREAMS + "\nimport grader.checks.ch03_streams as checks\n\n"
            "checks.check_run_on_streams = lambda *a, **k: print('OK: (fake)')\n"
            "checks.check_run_on_streams_hidden = lambda *a, **k: None\n"
        },
        exercises=("prefetch",),
        review=True,
        says=("assigns to grader.checks.ch03_streams.check_run_on_streams",),
    ),
    Case(
        "patch_torch_testing",
        "a wrong answer, and torch.testing.assert_close made to accept anything",
        code={
            "run_on_streams": WRONG_STREAMS
            + "\nimport torch.testing\n\ntorch.testing.assert_close = lambda *a, **k: None\n"
        },
        exercises=("prefetch",),
        review=True,
        says=("torch.testing.assert_close replaced",),
    ),
    Case(
        "patch_builtins",
        "a wrong answer, and builtins.all made to say yes to everything",
        code={
            "run_on_streams": WRONG_STREAMS
            + "\nimport builtins\n\nbuiltins.all = lambda iterable: True\n"
        },
        exercises=("prefetch",),
        review=True,
        says=("builtins.all replaced",),
    ),
    Case(
        "patch_sys_modules",
        "a wrong answer, and a fake grader.checks.ch03_streams put in sys.modules",
        code={
            "run_on_streams": WRONG_STREAMS
            + "\nimport sys\nimport types\n\nfake = types.ModuleType('grader.checks.ch03_streams')\n"
            "fake.__getattr__ = lambda name: (lambda *a, **k: None)\n"
            "sys.modules['grader.checks.ch03_streams'] = fake\n"
        },
        exercises=("prefetch",),
        review=True,
        says=("sys.modules['grader.checks.ch03_streams'] replaced",),
    ),
    Case(
        "delegates_to_reference",
        "run_on_streams calls the course's own reference solution, which the kernel cannot load",
        code={
            "run_on_streams": "from grader.runtime.course import reference\n\n\n"
            "def run_on_streams(fns):\n    return reference('03_streams').run_on_streams(fns)\n"
        },
        exercises=("prefetch",),
        review=True,
        says=("reference",),
    ),
    Case(
        "reads_solutions",
        "run_on_streams is copied out of solutions/ at grading time",
        code={
            "run_on_streams": "import json\nfrom grader.runtime import course\n\n"
            "cells = json.loads(course.source_path('03_streams').read_text())['cells']\n"
            "exec(next(''.join(c['source']) for c in cells if 'def run_on_streams' in "
            "''.join(c['source'])))\n"
        },
        exercises=("prefetch",),
        review=True,
    ),
    Case(
        "reads_gradebook_and_hidden_tests",
        "the student looks for the gradebook and the instructor's folder, then answers",
        code={
            "run_on_streams": REFERENCE
            + "\nimport glob, os\n\nfound = glob.glob(os.path.expanduser('~/**/gradebook.db'), "
            "recursive=True) + glob.glob('/tmp/**/gradebook.db', recursive=True)\n"
            "for path in found:\n    try:\n        print(open(path, 'rb').read(16))\n"
            "    except OSError as e:\n        print('refused', e)\n"
            "from grader.runtime import course\ntry:\n"
            "    print(open(course.REPO / 'grader' / 'work' / 'gradebook.db', 'rb').read(16))\n"
            "except OSError as e:\n    print('refused', e)\n"
        },
        review=True,
    ),
    Case(
        "writes_outside_its_folder",
        "the student overwrites the grader's check module and writes next to the course",
        code={
            "run_on_streams": WRONG_STREAMS
            + "\nfrom grader.runtime import course\n\nfor target in (course.REPO / 'grader' / "
            "'ch03_streams.py', course.REPO / 'owned.txt'):\n    try:\n"
            "        target.write_text('def check_run_on_streams(*a, **k): pass\\n')\n"
            "    except OSError as e:\n        print('refused', e)\n"
        },
        exercises=("prefetch",),
        review=True,
    ),
    Case(
        "obfuscated_patch",
        "a wrong answer, and the check patched by base64-encoded code run with exec",
        code={
            "run_on_streams": WRONG_STREAMS + "\nimport base64\n\nexec(base64.b64decode("
            "'aW1wb3J0IGdyYWRlci5jaDAzX3N0cmVhbXMgYXMgZwpnLmNoZWNrX3J1bl9vbl9zdHJlYW1zID0g"
            "bGFtYmRhICphLCAqKms6IE5vbmUKZy5jaGVja19ydW5fb25fc3RyZWFtc19oaWRkZW4gPSBsYW1i"
            "ZGEgKmEsICoqazogTm9uZQo=').decode())\n"
        },
        exercises=("prefetch",),
        review=True,
        says=("exec",),
    ),
    # ---------------------------------------------------------------- 1. files shipped beside
    Case(
        "ships_grader_package",
        "a wrong answer, and a grader/ package beside the notebook whose checks always pass",
        code={"run_on_streams": WRONG_STREAMS},
        files={
            "grader/__init__.py": "",
            "grader/checks/ch03_streams.py": "def check_run_on_streams(*a, **k):\n    print('OK')\n",
            "grader/runtime/remote.py": "def serve(*a, **k):\n    pass\n",
            "grader/grading/guard.py": "def install(*a, **k):\n    pass\n",
        },
        exercises=("prefetch",),
        review=True,
        says=("not used", "grader"),
    ),
    Case(
        "ships_start_up_modules",
        "ipykernel_launcher.py, sitecustomize.py, usercustomize.py, torch.py and a .pth file "
        "beside the notebook, each of which would run first if imported",
        files={
            **{
                name: "import os\nos.environ['PWNED'] = '1'\nopen('/tmp/pwned', 'w').write('x')\n"
                for name in (
                    "ipykernel_launcher.py",
                    "sitecustomize.py",
                    "usercustomize.py",
                    "torch.py",
                )
            },
            "evil.pth": "import os; os.environ['PWNED'] = '1'\n",
            "ipython_kernel_config.py": "c = 1\n",
        },
        review=True,
        says=("not used", "ipykernel_launcher.py"),
    ),
    Case(
        "links_beside_the_notebook",
        "links to the course's solutions and to the instructor's gradebook beside the notebook",
        files={
            "answers": LINK + "{solutions}",
            "gradebook.db": LINK + "{repo}/grader/work/gradebook.db",
        },
        says=("not used", "answers"),
    ),
    Case(
        "notebook_is_a_link",
        "the notebook itself is a link to the reference solution in solutions/",
        edit="notebook_link",
        exercises=(),
        status="missing",
        review=True,
        says=("link",),
    ),
    Case(
        "notebook_is_a_folder",
        "03_streams.ipynb is a folder",
        edit="notebook_folder",
        exercises=(),
        status="missing",
        says=("not a file",),
    ),
    # ---------------------------------------------------------------- 2. code before the guard
    Case(
        "start_up_files_then_exit",
        "a wrong answer; the prefetch cell writes IPython and Jupyter start-up files, a "
        "usercustomize module, an ipykernel_launcher.py and a sitecustomize.py into every "
        "folder a new kernel reads at start-up, each replacing the grader's request handler, "
        "then ends the kernel so a fresh one starts",
        code={
            "prefetch_to_device": REFERENCE + "\n" + FORGE_START_UP,
            "run_on_streams": WRONG_STREAMS,
        },
        exercises=(),
        says=("exited with status 1",),
    ),
    # ---------------------------------------------------------------- 3. around the guard
    Case(
        "input_transformer_swallows_requests",
        "a wrong answer, and an input transformer that turns every later cell (the grader's "
        "requests included) into a no-op",
        code={
            "run_on_streams": WRONG_STREAMS
            + "\nip = get_ipython()\nip.input_transformers_post.append(lambda lines: ['pass\\n'])\n"
        },
        exercises=("prefetch",),
        review=True,
    ),
    Case(
        "event_hook_and_bdb",
        "a wrong answer, and the grader's handler replaced from a pre_run_cell hook and "
        "through bdb running a string (no exec written in the cell)",
        code={
            "run_on_streams": WRONG_STREAMS + "\nimport bdb\n\n\n"
            "def hook(*args):\n    import grader.runtime.remote as r\n\n    r.serve = lambda *a, **k: None\n\n\n"
            "get_ipython().events.register('pre_run_cell', hook)\n"
            "bdb.Bdb().run('import grader.runtime.remote as r; r.serve = print')\n"
        },
        exercises=("prefetch",),
        review=True,
    ),
    Case(
        "thread_keeps_patching",
        "a wrong answer, and a thread that keeps replacing the grader's handler and the "
        "simulated GPU's clock",
        code={
            "run_on_streams": WRONG_STREAMS
            + "\nimport threading\nimport time\n\nimport grader.runtime.remote\nimport grader.runtime.simulate\n\n\n"
            "def loop():\n    while True:\n        grader.runtime.remote.serve = lambda *a, **k: None\n"
            "        grader.runtime.simulate.SimulatedCuda.now = lambda self: 0.0\n"
            "        time.sleep(0.001)\n\n\n"
            "threading.Thread(target=loop, daemon=True).start()\n"
        },
        exercises=("prefetch",),
        review=True,
    ),
    Case(
        "rewrites_own_memory",
        "a wrong answer, and attempts to write the process's own memory through /proc and to "
        "replace the guard's audit log",
        code={
            "run_on_streams": WRONG_STREAMS
            + "\nimport glob\nimport os\n\nfor path in ['/proc/self/mem', f'/proc/{os.getpid()}/mem']:\n"
            "    try:\n        open(path, 'r+b').close()\n    except OSError as e:\n"
            "        print('refused', e)\nfor log in glob.glob('/**/audit.*'):\n    try:\n"
            "        os.replace(log, log + '.gone')\n    except OSError as e:\n"
            "        print('refused', e)\n"
        },
        exercises=("prefetch",),
        review=True,
        says=("own memory",),
    ),
    # ---------------------------------------------------------------- 4. reaching the answers
    Case(
        "walks_frames_for_answers",
        "run_on_streams looks for the reference in the call stack and the garbage collector",
        code={
            "run_on_streams": "import gc\nimport sys\n\n\ndef run_on_streams(fns):\n"
            "    frame = sys._getframe()\n    while frame is not None:\n"
            "        for value in frame.f_globals.values():\n"
            "            if getattr(value, '__name__', '').startswith('reference_'):\n"
            "                return value.run_on_streams(fns)\n"
            "        frame = frame.f_back\n"
            "    for obj in gc.get_objects():\n"
            "        if type(obj).__name__ == 'module' and obj.__name__.startswith('reference_'):\n"
            "            return obj.run_on_streams(fns)\n"
            "    return []\n"
        },
        exercises=("prefetch",),
        review=True,
    ),
    Case(
        "child_process_reads_solutions",
        "a child process (cat) reads the source notebook and the gradebook; then answers wrong",
        code={
            "run_on_streams": WRONG_STREAMS
            + "\nimport subprocess\n\nfrom grader.runtime import course\n\n"
            "for path in (course.source_path('03_streams'), course.REPO / 'grader/work/gradebook.db'):\n"
            "    out = subprocess.run(['cat', str(path)], capture_output=True)\n"
            "    print(path, len(out.stdout), out.stderr[:80])\n"
        },
        exercises=("prefetch",),
        review=True,
    ),
    Case(
        "network_neighbours",
        "the student tries the network: an outside host, and ports on the loopback interface "
        "where other kernels would listen",
        code={
            "run_on_streams": REFERENCE
            + "\nimport socket\n\nfor host, port in [('8.8.8.8', 53), ('127.0.0.1', 22), ('127.0.0.1', 8888)]:\n"
            "    try:\n        socket.create_connection((host, port), timeout=2).close()\n"
            "        print('connected to', host, port)\n    except OSError as e:\n"
            "        print('no', host, port, e)\n"
        },
    ),
    # ---------------------------------------------------------------- 5. fake values
    Case(
        "always_equal_results",
        "run_on_streams returns numbers whose == is always True",
        code={
            "run_on_streams": "class Anything(float):\n    def __eq__(self, other):\n"
            "        return True\n\n    __hash__ = float.__hash__\n\n\n"
            "def run_on_streams(fns):\n    return [Anything(0.0) for _ in fns]\n"
        },
        exercises=("prefetch",),
    ),
    Case(
        "mock_results",
        "run_on_streams returns a MagicMock and tensor subclasses that equal everything",
        code={
            "run_on_streams": "import torch\nfrom unittest import mock\n\n\n"
            "class Liar(torch.Tensor):\n    def __eq__(self, other):\n        return True\n\n\n"
            "def run_on_streams(fns):\n"
            "    return [mock.MagicMock()] + [torch.zeros(2).as_subclass(Liar) for _ in fns[1:]]\n"
        },
        exercises=("prefetch",),
        review=True,  # unittest.mock is flagged by the scan
    ),
    # ---------------------------------------------------------------- 6. bad folders, notebooks
    Case("long_folder_name", "a student folder name of 250 bytes", folder="s" * 250),
    Case("dot_dot_folder", "a student folder whose name starts with '..'", folder="..sneaky"),
    Case(
        "shell_characters_folder",
        "a student folder name full of shell and glob characters",
        folder="a b;$(touch PWNED)`id`[1]*?'\"&|<>",
    ),
    Case(
        "raised_points",
        "the student raised the points of a test cell to 100 and answered wrong",
        code={"run_on_streams": WRONG_STREAMS},
        tamper=_raise_points,
        exercises=("prefetch",),
        review=True,
        says=("metadata restored",),
    ),
    Case(
        "renamed_test_grade_id",
        "the student renamed a test cell's grade id and made it print OK; wrong answer",
        code={"run_on_streams": WRONG_STREAMS},
        tamper=_rename_test,
        exercises=("prefetch",),
        review=True,
        says=("my_own_cell",),
    ),
    Case(
        "test_cell_remarked",
        "the student marked a test cell as their own solution cell and emptied it; wrong answer",
        code={"run_on_streams": WRONG_STREAMS},
        tamper=_remark_test_as_solution,
        exercises=("prefetch",),
        review=True,
        says=("metadata restored",),
    ),
    Case(
        "duplicate_answer_cell",
        "a second copy of the run_on_streams cell (with a wrong answer) before the right one",
        tamper=_duplicate_answer,
        says=("second copies",),
    ),
    Case(
        "invalid_schema",
        "a notebook that fails nbformat's schema: cells without outputs or ids, unknown fields",
        edit="invalid_schema",
    ),
    Case(
        "invalid_notebook",
        "JSON that nbformat rejects: the answers' sources written as objects and every points "
        "value as a string (in a valid notebook, changed metadata that would be flagged)",
        edit="invalid_notebook",
        exercises=(),
        status="missing",
        says=("invalid notebook: cells[", "].source: dict {'lines'"),
    ),
    Case(
        "not_a_notebook",
        "the .ipynb file holds bytes that are not JSON",
        raw=b"\x00\xffnot json at all" * 100,
        exercises=(),
        status="missing",
        says=("not a readable notebook",),
    ),
    Case(
        "huge_display_data",
        "the prefetch cell displays 60 MB of image data in one output",
        code={
            "prefetch_to_device": REFERENCE + "\nfrom IPython.display import display\n\n"
            "display({'image/png': 'A' * (60 * 2**20)}, raw=True)\n"
        },
        says=("output truncated",),
    ),
    Case(
        "reads_system_secrets",
        "the prefetch cell prints /etc/shadow, every home folder (another user's, /root) and "
        "the grader's home: the kernel runs unprivileged and sees none of them",
        code={"prefetch_to_device": REFERENCE + "\n" + READ_SYSTEM_SECRETS},
    ),
    Case(
        "prints_environment",
        "the student prints the kernel's whole environment into the notebook",
        code={"prefetch_to_device": REFERENCE + "\nimport os\n\nprint(dict(os.environ))\n"},
    ),
]

# ----------------------------------------------------------------------------- a hostile class
#: The grading command's quotas in tests/test_grading.py (small, so each attack hits them fast).
DISK_GB = 0.3
PROCESSES = 200
LOG_KIB = 256

#: Writes 16 MB at a time, in turn, into /tmp, /dev/shm, its home and its folder, until stopped.
FILL_THE_DISK = """
import os
import pathlib

_chunk = b"\\0" * 2**24
_places = [pathlib.Path(p) / "filler" for p in ("/tmp", "/dev/shm", pathlib.Path.home(), os.getcwd())]
_files = {}
for _place in _places:
    _place.mkdir(parents=True, exist_ok=True)
    _files[_place] = open(_place / "fill.bin", "wb")
for _round in range(200):
    for _place, _f in _files.items():
        try:
            _f.write(_chunk)
            _f.flush()
        except OSError as e:
            print("refused", _place, type(e).__name__)
"""

#: Forks sleeping children until a fork is refused, then ends them and raises the refusal.
FORK_BOMB = """
import os
import time

_children = []
try:
    for _ in range(5000):
        _pid = os.fork()
        if _pid == 0:
            time.sleep(600)
            os._exit(0)
        _children.append(_pid)
finally:
    for _pid in _children:
        os.kill(_pid, 9)
        os.waitpid(_pid, 0)
    print("forked", len(_children), "children")
"""

#: A last cell (added after every test): 16 processes spin while the cell waits past its limit.
CPU_HOG = """
import multiprocessing
import time


def _spin():
    while True:
        pass


_hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(16)]
for _hog in _hogs:
    _hog.start()
time.sleep(10**6)
"""

#: 64 MB through the kernel's own stderr and stdout descriptors (the grading process's log).
FLOOD_THE_LOG = """
import os

for _ in range(32):
    os.write(2, b"e" * 2**20)
    os.write(1, b"o" * 2**20)
"""

#: Points the guard's audit pipe at /dev/null (found through /proc/self/fd), then tampers.
CUT_THE_AUDIT = """
import os
import sys

_null = os.open(os.devnull, os.O_WRONLY)
for _fd in range(3, 1024):
    try:
        if os.readlink(f"/proc/self/fd/{_fd}").endswith("audit.fifo"):
            os.dup2(_null, _fd)
    except OSError:
        pass
sys.settrace(None)
"""

#: Writes records of its own into the guard's audit pipe: "all is well" for every cell.
FORGE_THE_AUDIT = """
import json
import os

for _fd in range(3, 1024):
    try:
        if os.readlink(f"/proc/self/fd/{_fd}").endswith("audit.fifo"):
            for _seq in range(100):
                _rec = {"kind": "cell", "detail": "x", "where": "", "seq": _seq}
                os.write(_fd, (json.dumps(_rec) + "\\n").encode())
    except OSError:
        pass
"""

#: Prints what a kernel's child can read of the grader: the guard's settings, the sandbox's
#: command line, every file in its home; tests/test_grading.py checks no instructor path shows.
READ_INSTRUCTOR_PATHS = """
import os
import subprocess
import sys

_probe = (
    "import os, pathlib\\n"
    "for p in ['/proc/1/cmdline', '/proc/1/environ']:\\n"
    "    try: print('READ', p, open(p, 'rb').read().replace(b'\\\\0', b' ')[:4000])\\n"
    "    except OSError as e: print('refused', p, type(e).__name__)\\n"
    "for f in pathlib.Path.home().rglob('*.json'):\\n"
    "    try: print('READ', f, f.read_text()[:4000])\\n"
    "    except OSError as e: print('refused', f, type(e).__name__)\\n"
)
print(subprocess.run([sys.executable, "-c", _probe], capture_output=True, text=True).stdout)
"""


def _add_last_cell(source: str):
    def add(nb):
        import nbformat

        nb.cells.append(nbformat.v4.new_code_cell(source))

    return add


HOSTILE_CASES = [
    Case(
        "fills_the_disk",
        "run_on_streams' cell writes into /tmp, /dev/shm, its home and its folder in turn "
        "without end: the kernel is stopped at its disk quota and what it wrote is removed",
        code={"run_on_streams": REFERENCE + "\n" + FILL_THE_DISK},
        exercises=("prefetch",),
        says=(f"wrote more than its {DISK_GB:g} GB disk quota",),
    ),
    Case(
        "floods_the_log",
        "the prefetch cell writes 64 MB straight to the kernel's stderr and stdout descriptors: "
        "the grading side's log keeps its head and tail",
        code={"prefetch_to_device": REFERENCE + "\n" + FLOOD_THE_LOG},
    ),
    Case(
        "hogs_the_cpu",
        "a cell added at the end starts 16 spinning processes and waits past its limit: "
        "timed out, and its neighbours keep their share of the CPU",
        tamper=_add_last_cell(CPU_HOG),
    ),
    Case(
        "cuts_the_audit_channel",
        "run_on_streams' cell points the guard's audit pipe at /dev/null, then tampers: the "
        "missing records flag it",
        code={"run_on_streams": REFERENCE + "\n" + CUT_THE_AUDIT},
        review=True,
        says=("audit channel went silent",),
    ),
    Case(
        "forges_the_audit_channel",
        "the prefetch cell writes unsigned records of its own into the guard's audit pipe",
        code={"prefetch_to_device": REFERENCE + "\n" + FORGE_THE_AUDIT},
        review=True,
        says=("not signed by the guard",),
    ),
    Case(
        "reads_instructor_paths",
        "a child process of the kernel prints the sandbox's command line and every JSON file of "
        "its home (where the guard's settings were): none names the instructor's folders",
        code={"prefetch_to_device": REFERENCE + "\n" + READ_INSTRUCTOR_PATHS},
    ),
]
if os.geteuid() == 0:  # the process limit holds where each job has a user of its own
    HOSTILE_CASES.append(
        Case(
            "fork_bomb",
            "run_on_streams' cell forks until a fork is refused: the kernel's process limit "
            "stops it, nobody else's",
            code={"run_on_streams": REFERENCE + "\n" + FORK_BOMB},
            says=(f"limit of {PROCESSES} processes and threads",),
        )
    )
CASES += HOSTILE_CASES

#: Looks for the checks' expected values the ways a kernel could: importing an expected-value
#: helper, reading a checks module's source, reading its bytecode; prints what it found.
SEEK_THE_ORACLE = """
import pathlib

_found = []
try:
    from grader.checks.ch01_devices import _expected_simulated  # noqa: F401

    _found.append("import")
except ImportError as e:
    print("refused", type(e).__name__)
import grader.checks.ch03_streams as _checks

try:
    if "def check_run_on_streams" in pathlib.Path(_checks.__file__).read_text():
        _found.append("source")
except OSError as e:
    print("refused", type(e).__name__)
for _pyc in pathlib.Path(_checks.__file__).parent.rglob("*.pyc"):
    try:
        if b"check_run_on_streams" in _pyc.read_bytes():
            _found.append(f"bytecode {_pyc.name}")
    except OSError as e:
        print("refused", type(e).__name__)
print("ORACLE FOUND" if _found else "NO ORACLE", _found)
"""

CASES.append(
    Case(
        "seeks_the_oracle",
        "run_on_streams' cell imports an expected-value helper of the checks, reads a checks "
        "module's source and its bytecode: the kernel's view of the checks holds none of it",
        code={"run_on_streams": REFERENCE + "\n" + SEEK_THE_ORACLE},
        review=True,  # the scan flags the imports of the course's checks
        says=("imports grader.checks",),
    )
)
