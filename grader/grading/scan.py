"""Read a submission's own code, outside any kernel, for ways to reach the grading machinery.

A notebook's test cells are restored from the gradebook before grading, but everything else a
student wrote runs before them, in the same process as the checks: it could replace a check,
``torch.testing``, a builtin or an entry of ``sys.modules``, call the reference solution, or
read the gradebook. Such code has to be *in the notebook*, so this module parses every code
cell the student wrote or changed (solution cells, added cells, edited demo cells; cells equal
to the released ones are the course's own) and lists each construct that can do it:

* assignment to (or deletion of) attributes and items of protected modules: ``grader``,
  ``torch.testing``, ``builtins``, ``sys``, ``unittest``, ``numpy.testing``, ``nbgrader``,
  through any import alias;
* imports of ``builtins``, ``ctypes``, ``gc``, ``importlib``, ``marshal``, ``sqlite3``,
  ``unittest.mock``, ``nbgrader``, and of **any** module of the course's own package
  (``grader``: its checks, which compute expected values, its runtime and grading modules)
  except the names the assignment's own notebook imports in its cells
  (:func:`course_imports`, read from ``solutions/``; so the list follows the package and
  cannot go stale);
* calls that act on names or code given at run time: ``exec``, ``eval``, ``compile``,
  ``__import__``, ``setattr``, ``delattr``, ``globals``, ``vars``;
* introspection that reaches other code's internals: ``__code__``, ``__globals__``,
  ``__closure__``, ``__builtins__``, ``__subclasses__``, frames (``f_globals``, ``f_back``,
  ``sys._getframe``), ``sys.modules``, tracing hooks, and IPython's machinery that runs every
  later cell (input and AST transformers, event callbacks, the display publisher, comms);
* string constants that name the course's private files or grading switches (``solutions``,
  ``gradebook``, ``autograded``, ``GPU_COURSE_AUTOGRADE``, ``BEGIN HIDDEN``, ...).

A finding is a reason for a person to look, not a verdict; the course's reference solutions
and every sample answer produce none (``tests/test_grading.py``).
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from grader.runtime import course

PROTECTED_MODULES = (
    "grader",
    "torch.testing",
    "builtins",
    "sys",
    "unittest",
    "numpy.testing",
    "nbgrader",
)
#: Modules outside the course whose import in a student's cell is worth a look.
RISKY_IMPORTS = (
    "builtins",
    "ctypes",
    "gc",
    "importlib",
    "marshal",
    "sqlite3",
    "unittest.mock",
    "mock",
    "nbgrader",
)
#: The course's own package: importing anything of it from a student's cell is worth a look
#: (its checks compute expected values, its grading modules hold the instructor's paths),
#: except the names the assignment's own notebook imports in its cells (:func:`course_imports`).
COURSE_PACKAGE = "grader"
RISKY_CALLS = {"exec", "eval", "compile", "__import__", "setattr", "delattr", "globals", "vars"}
RISKY_ATTRIBUTES = {
    "__code__",
    "__globals__",
    "__closure__",
    "__builtins__",
    "__subclasses__",
    "__dict__",
    "f_globals",
    "f_locals",
    "f_back",
    "_getframe",
    "settrace",
    "setprofile",
    "modules",
    # IPython's machinery: what runs every later cell, the grader's requests included
    "input_transformers_cleanup",
    "input_transformers_post",
    "ast_transformers",
    "events",
    "display_pub",
    "displayhook",
    "comm_manager",
    "shell_handlers",
}
RISKY_STRINGS = re.compile(
    r"solutions|gradebook|autograded|submitted/|feedback/|GPU_COURSE_|NBGRADER_|BEGIN HIDDEN|"
    r"BEGIN SOLUTION|\.db\b|grader/work",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Finding:
    """One construct worth a look."""

    cell: str  # grade id of a solution cell, else the cell id
    line: int
    rule: str
    code: str

    def __str__(self) -> str:
        return f"{self.cell} line {self.line}: {self.rule}: {self.code}"


def _protected(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in PROTECTED_MODULES)


def _risky_import(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in RISKY_IMPORTS)


def course_modules() -> list[str]:
    """Every module of the course's package (``grader`` and all its submodules), found by
    walking the package on disk, so that no list of names can go stale."""
    import pkgutil

    import grader

    names = [COURSE_PACKAGE]
    for info in pkgutil.walk_packages(grader.__path__, prefix=f"{COURSE_PACKAGE}."):
        names.append(info.name)
    return sorted(names)


def _is_course_module(module: str) -> bool:
    return module == COURSE_PACKAGE or module.startswith(COURSE_PACKAGE + ".")


def _imports_of(source: str) -> set[tuple[str, str]]:
    """``(module, name)`` for each ``from module import name`` of ``source`` and
    ``(module, "")`` for each ``import module`` (its parents included)."""
    try:
        tree = ast.parse(_python_source(source))
    except SyntaxError:
        return set()
    found: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                found |= {(".".join(parts[: i + 1]), "") for i in range(len(parts))}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {(node.module, alias.name) for alias in node.names}
    return found


@functools.cache
def course_imports(assignment: str) -> frozenset[tuple[str, str]]:
    """What the assignment's own notebook (``solutions/``: its given code, demos and reference
    answers; not its test cells, which nbgrader restores) imports from the course's package:
    the only imports of ``grader`` a student's cell makes without being flagged."""
    nb = course.read(course.source_path(assignment))
    found: set[tuple[str, str]] = set()
    for cell in nb.cells:
        meta = course.nbgrader_meta(cell)
        if cell.cell_type != "code" or (meta.get("grade") and not meta.get("solution")):
            continue
        found |= {i for i in _imports_of(cell.source) if _is_course_module(i[0])}
    return frozenset(found)


def _course_import_allowed(module: str, name: str, allowed: frozenset) -> bool:
    return (module, name) in allowed or (not name and any(m == module for m, _ in allowed))


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain rooted at a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Subscript):
        return _dotted(node.value)
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _python_source(source: str) -> str:
    """The cell as Python: IPython magics and shell escapes blanked (``%%writefile`` keeps its
    body, which is the script)."""
    lines = source.splitlines()
    if lines and lines[0].startswith("%%writefile"):
        lines = [""] + lines[1:]
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)


class _Visitor(ast.NodeVisitor):
    def __init__(
        self,
        cell: str,
        source_lines: list[str],
        aliases: dict[str, str],
        allowed: frozenset[tuple[str, str]] = frozenset(),
    ):
        self.cell, self.lines, self.aliases = cell, source_lines, aliases
        self.allowed = allowed
        self.found: list[Finding] = []

    def add(self, node: ast.AST, rule: str) -> None:
        line = getattr(node, "lineno", 0)
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        self.found.append(Finding(self.cell, line, rule, code[:160]))

    def resolve(self, dotted: str | None) -> str | None:
        if not dotted:
            return None
        root, _, rest = dotted.partition(".")
        module = self.aliases.get(root)
        if module is None:
            return None
        return f"{module}.{rest}" if rest else module

    # imports ------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.aliases[(alias.asname or alias.name).split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0]
            )
            if _risky_import(alias.name) or (
                _is_course_module(alias.name)
                and not _course_import_allowed(alias.name, "", self.allowed)
            ):
                self.add(node, f"imports {alias.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            full = f"{module}.{alias.name}"
            self.aliases[alias.asname or alias.name] = full
            course_import = _is_course_module(module) and not _course_import_allowed(
                module, alias.name, self.allowed
            )
            if _risky_import(module) or _risky_import(full) or course_import:
                self.add(node, f"imports {full}")

    # assignments to protected modules --------------------------------------------------
    def _check_target(self, target: ast.AST, node: ast.AST, verb: str) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._check_target(t, node, verb)
            return
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            module = self.resolve(_dotted(target))
            if module and _protected(module):
                self.add(node, f"{verb} {module}")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target, node, "assigns to")
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target, node, "assigns to")
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_target(target, node, "deletes")
        self.generic_visit(node)

    # calls, attributes, strings --------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in RISKY_CALLS:
            target = self.resolve(_dotted(node.args[0])) if node.args else None
            if node.func.id in ("setattr", "delattr") and target and not _protected(target):
                pass  # e.g. setattr(torch.backends.cudnn, "benchmark", False)
            else:
                self.add(node, f"calls {node.func.id}()")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in RISKY_ATTRIBUTES:
            owner = self.resolve(_dotted(node.value)) or ""
            if node.attr == "modules" and owner != "sys":
                pass  # e.g. model.modules()
            else:
                self.add(node, f"uses .{node.attr}")
        module = self.resolve(_dotted(node))
        if module and (
            module == "grader.runtime.course.reference" or module.endswith(".reference")
        ):
            if module.startswith("grader"):
                self.add(node, f"uses {module}")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "__builtins__":
            self.add(node, "uses __builtins__")
        module = self.aliases.get(node.id)
        if module in ("grader.runtime.course.reference",):
            self.add(node, f"uses {module}")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and RISKY_STRINGS.search(node.value):
            self.add(node, f"names course files or switches ({node.value[:60]!r})")


def _released_sources(assignment: str, release: Path | None = None) -> set[str]:
    from grader.grading.release import student_copy  # nbgrader's import, only when grading

    nb = course.read(release or student_copy(assignment))
    return {c.source for c in nb.cells if c.cell_type == "code"}


def student_cells(nb, assignment: str, release: Path | None = None) -> list[tuple[str, str]]:
    """``(label, source)`` of the code cells the student wrote or changed: solution cells,
    cells not in the release (the student copy at ``release``, by default the one generated
    from ``solutions/``), and released non-test cells whose source changed. Test cells are left
    out: nbgrader restores them from the gradebook before anything runs."""
    released = _released_sources(assignment, release)
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = course.nbgrader_meta(cell)
        if meta.get("grade") and not meta.get("solution"):
            continue
        if meta.get("solution") or cell.source not in released:
            out.append((meta.get("grade_id") or cell.get("id") or "?", cell.source))
    return out


def scan_notebook(nb, assignment: str, release: Path | None = None) -> list[Finding]:
    """Findings in the student's own code cells of a submitted notebook (see the module),
    against the student copy at ``release`` (:func:`student_cells`)."""
    aliases: dict[str, str] = {}
    found: list[Finding] = []
    allowed = course_imports(assignment)
    for label, source in student_cells(nb, assignment, release):
        text = _python_source(source)
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue  # a cell that does not parse does not run either
        visitor = _Visitor(label, text.splitlines(), aliases, allowed)
        visitor.visit(tree)
        found.extend(visitor.found)
    return found


def scan_source(source: str, label: str = "code", assignment: str = "") -> list[Finding]:
    """Findings in one piece of Python source (for tests and sample files); with an
    ``assignment``, its notebook's own imports of the course are not findings."""
    allowed = course_imports(assignment) if assignment else frozenset()
    visitor = _Visitor(label, _python_source(source).splitlines(), {}, allowed)
    visitor.visit(ast.parse(_python_source(source)))
    return visitor.found
