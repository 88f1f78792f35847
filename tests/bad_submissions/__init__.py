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
        ``missing``) or None.
    exercises: the exercises that must still score full marks (``prefetch``, ``streams``);
        the others score 0.
    status: ``graded`` or ``missing``.
    review: whether the submission must be flagged for manual review.
    says: words the report's notes or review reasons must contain (case-insensitive).
"""

from __future__ import annotations

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
        says=("memoryerror",),
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
        "the student deleted both visible test cells: nbgrader restores them",
        edit="delete_tests",
        says=("deleted test cells restored",),
    ),
    Case(
        "edited_test_cell",
        "the student replaced a test cell with `pass` and answered wrong: the test is restored",
        code={"run_on_streams": WRONG_STREAMS},
        edit="edit_tests",
        exercises=("prefetch",),
        says=("edited test cells restored",),
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
        "a wrong answer, and the grader's check replaced by one that always passes",
        code={
            "run_on_streams": WRONG_STREAMS + "\nimport grader.ch03_streams as checks\n\n"
            "checks.check_run_on_streams = lambda *a, **k: print('OK: (fake)')\n"
            "checks.check_run_on_streams_hidden = lambda *a, **k: None\n"
        },
        exercises=("prefetch",),
        review=True,
        says=("grader.ch03_streams.check_run_on_streams replaced",),
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
        "a wrong answer, and a fake grader.ch03_streams put in sys.modules",
        code={
            "run_on_streams": WRONG_STREAMS
            + "\nimport sys\nimport types\n\nfake = types.ModuleType('grader.ch03_streams')\n"
            "fake.__getattr__ = lambda name: (lambda *a, **k: None)\n"
            "sys.modules['grader.ch03_streams'] = fake\n"
        },
        exercises=("prefetch",),
        review=True,
        says=("sys.modules['grader.ch03_streams'] replaced",),
    ),
    Case(
        "delegates_to_reference",
        "run_on_streams calls the course's own reference solution",
        code={
            "run_on_streams": "from grader.course import reference\n\n\n"
            "def run_on_streams(fns):\n    return reference('03_streams').run_on_streams(fns)\n"
        },
        review=True,  # the points are earned by the course's code: for a person to decide
        says=("reference",),
    ),
    Case(
        "reads_solutions",
        "run_on_streams is copied out of solutions/ at grading time",
        code={
            "run_on_streams": "import json\nfrom grader import course\n\n"
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
            "from grader import course\ntry:\n"
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
            + "\nfrom grader import course\n\nfor target in (course.REPO / 'grader' / "
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
]
