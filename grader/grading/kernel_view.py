"""The course's checks as a grading kernel sees them: the probes, never an expected value.

Under autograde every check runs in the grading process (:mod:`grader.grading.judge`); the
student's kernel only runs **probes**: module-level functions named ``_probe*`` (their
docstrings say "Probe:"; :func:`grader.runtime.remote._require_probe` refuses any other function
of ``grader.checks``) that call the student's code and hand back what they saw. A checks module
also holds what the grading side needs and the kernel must not reach: functions that compute
expected values (01's ``_expected_simulated``), the checks themselves, their cases.

:func:`build` writes, for every module of ``grader/checks``, the **kernel's view**: the same
module with only

* its probes, the functions marked ``@kernel_side`` (they travel to the kernel inside a
  request's arguments; :func:`grader.runtime.remote.kernel_side`, whose pickler refuses any
  other function of a checks module), every class (the models, datasets and recorders that
  travel to and from probes),
  the names the course's notebooks import from it in their own cells (read from ``solutions/``:
  :func:`grader.grading.scan.course_imports`), the names the course's kernel-side modules take
  from it (the guard and the runtime: :data:`KERNEL_SIDE`), and its other top-level statements;
* everything those use, followed through the module and across ``grader.checks`` imports
  (a name imported from another checks module is kept there too);
* its imports of other modules whole, and of ``grader.checks`` names only those kept there;

and nothing else. The sandbox (:mod:`grader.grading.sandbox`) binds each view read-only over the
real file and hides the checks' ``__pycache__`` folders and data files, so code in the kernel
that imports a checks module, reads its source or unmarshals its bytecode finds no expected
value. The grading process keeps the real modules.

May import :mod:`grader.runtime.course` (the course's layout) and :mod:`grader.grading.scan`
(the notebooks' own imports); parses the checks with :mod:`ast`, never imports them.
"""

from __future__ import annotations

import ast
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

from grader.runtime import course

#: The package whose modules get a kernel view.
CHECKS_PACKAGE = "grader.checks"
#: Functions of a checks module the kernel may run (see the module docstring).
PROBE_PREFIX = "_probe"
#: The file :func:`build` writes its real path -> view path table to, in its folder.
INDEX = "index.json"


def checks_folder() -> Path:
    """``grader/checks`` of this course."""
    return course.PACKAGE / "checks"


def _module_name(path: Path) -> str:
    rel = path.relative_to(checks_folder()).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([CHECKS_PACKAGE, *parts])


def _is_checks(module: str) -> bool:
    return module == CHECKS_PACKAGE or module.startswith(CHECKS_PACKAGE + ".")


@dataclass
class _Module:
    name: str
    path: Path
    tree: ast.Module
    is_package: bool
    #: top-level name -> the statements that bind it (def, class, assignment)
    defined: dict[str, list[ast.stmt]] = field(default_factory=dict)
    #: alias -> (checks module, name) for ``from grader.checks.X import name as alias``
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: alias -> checks module, for ``from grader.checks import common`` and ``import ... as``
    module_aliases: dict[str, str] = field(default_factory=dict)
    keep: set[str] = field(default_factory=set)

    def absolute(self, node: ast.ImportFrom) -> str:
        """The module an ``ImportFrom`` names, relative imports resolved."""
        if not node.level:
            return node.module or ""
        package = self.name if self.is_package else self.name.rsplit(".", 1)[0]
        base = package.split(".")
        base = base[: len(base) - (node.level - 1)]
        return ".".join([*base, *([node.module] if node.module else [])])


def _bound_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _parse(path: Path) -> _Module:
    module = _Module(
        _module_name(path), path, ast.parse(path.read_text()), path.name == "__init__.py"
    )
    for node in module.tree.body:
        for name in _bound_names(node):
            module.defined.setdefault(name, []).append(node)
        if isinstance(node, ast.ImportFrom) and _is_checks(module.absolute(node)):
            for alias in node.names:
                if alias.name != "*":
                    source = module.absolute(node)
                    module.imported[alias.asname or alias.name] = (source, alias.name)
                    submodule = f"{source}.{alias.name}"
                    if _module_path(submodule) is not None:
                        module.module_aliases[alias.asname or alias.name] = submodule
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_checks(alias.name) and alias.asname:
                    module.module_aliases[alias.asname] = alias.name
    return module


def _module_path(name: str) -> Path | None:
    """The file of a checks module or package, or None when there is none."""
    parts = name.split(".")[2:]
    base = checks_folder().joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _marked(node: ast.stmt) -> bool:
    """Whether a function is decorated ``@kernel_side`` (:func:`grader.runtime.remote.kernel_side`)."""
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        (isinstance(d, ast.Name) and d.id == "kernel_side")
        or (isinstance(d, ast.Attribute) and d.attr == "kernel_side")
        for d in node.decorator_list
    )


def _roots(module: _Module, notebook_imports: set[tuple[str, str]]) -> set[str]:
    roots = set()
    for node in module.tree.body:
        if (
            isinstance(node, ast.ClassDef)
            or _marked(node)
            or (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.name.startswith(PROBE_PREFIX)
            )
        ):
            roots.add(node.name)
        elif not isinstance(
            node,
            (ast.FunctionDef, ast.AsyncFunctionDef, ast.Assign, ast.AnnAssign, ast.AugAssign,
             ast.Import, ast.ImportFrom),
        ):  # fmt: skip
            roots |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    roots |= {name for mod, name in notebook_imports if mod == module.name}
    return roots


def _used_names(nodes: list[ast.stmt]) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def _used_attributes(nodes: list[ast.stmt], aliases: dict[str, str]) -> set[tuple[str, str]]:
    """``(checks module, name)`` for each ``alias.name`` where ``alias`` is a checks module."""
    return {
        (aliases[n.value.id], n.attr)
        for node in nodes
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
    }


@functools.cache
def _notebook_imports() -> frozenset[tuple[str, str]]:
    from grader.grading import scan

    found: set[tuple[str, str]] = set()
    for aid in course.assignments():
        found |= scan.course_imports(aid)
    return frozenset(found)


#: The course's modules outside ``grader/checks`` that run in a grading kernel: its runtime
#: (the probes' helpers, the simulated GPU, the notebooks' imports) and the guard.
KERNEL_SIDE = ("runtime", "grading/guard.py")


def _course_uses() -> set[tuple[str, str]]:
    """``(checks module, name)`` for every name the course's kernel-side modules
    (:data:`KERNEL_SIDE`) take from a checks module (``from grader.checks.common import
    grading_mode``, ``common.CUDA_SUFFIX``): they run in the kernel and need them."""
    found: set[tuple[str, str]] = set()
    kernel_side = [course.PACKAGE / part for part in KERNEL_SIDE]
    for path in sorted(course.PACKAGE.rglob("*.py")):
        if not any(path == part or part in path.parents for part in kernel_side):
            continue
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and _is_checks(node.module or "")
            ):
                for alias in node.names:
                    if _module_path(f"{node.module}.{alias.name}") is not None:
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    else:
                        found.add((node.module, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if _is_checks(alias.name) and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
            ):
                found.add((aliases[node.value.id], node.attr))
    return found


def views() -> dict[Path, str]:
    """The kernel's view of every checks module: real path -> source (see the module)."""
    modules = {m.name: m for m in map(_parse, sorted(checks_folder().rglob("*.py")))}
    roots = set(_notebook_imports()) | _course_uses()
    wanted: dict[str, set[str]] = {name: _roots(m, roots) for name, m in modules.items()}
    changed = True
    while changed:
        changed = False
        for name, module in modules.items():
            todo = list(wanted[name] - module.keep)
            while todo:
                item = todo.pop()
                if item in module.keep:
                    continue
                if item in module.imported:
                    module.keep.add(item)
                    source, original = module.imported[item]
                    if source in modules and original not in wanted[source]:
                        wanted[source].add(original)
                        changed = True
                    continue
                if item not in module.defined:
                    continue
                module.keep.add(item)
                todo += list(_used_names(module.defined[item]) - module.keep)
                for source, original in _used_attributes(
                    module.defined[item], module.module_aliases
                ):
                    if source in modules and original not in wanted[source]:
                        wanted[source].add(original)
                        changed = True
    return {m.path: _render(m, modules) for m in modules.values()}


def _render(module: _Module, modules: dict[str, _Module]) -> str:
    body: list[ast.stmt] = []
    for index, node in enumerate(module.tree.body):
        if index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            body.append(node)  # the docstring
        elif isinstance(node, ast.ImportFrom) and _is_checks(module.absolute(node)):
            source = module.absolute(node)
            names = [
                alias
                for alias in node.names
                if alias.name == "*"
                or f"{source}.{alias.name}" in modules  # a submodule
                or (source in modules and alias.name in modules[source].keep)
                or source not in modules
            ]
            if names:
                body.append(ast.ImportFrom(module=node.module, names=names, level=node.level))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            body.append(node)
        elif _bound_names(node):  # a def, class or assignment: kept when a kept name is bound
            if any(n in module.keep for n in _bound_names(node)):
                body.append(node)
        else:
            body.append(node)
    tree = ast.Module(body=body, type_ignores=[])
    header = (
        "# The grading kernel's view of this module (grader/grading/kernel_view.py): its probes\n"
        "# and what they use; the checks and their expected values stay in the grading process.\n"
    )
    return header + ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def hidden_files() -> list[Path]:
    """Files of ``grader/checks`` the kernel must not read: bytecode caches and data files."""
    folder = checks_folder()
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts
    )


def bytecode_folders() -> list[Path]:
    """The ``__pycache__`` folders of ``grader/checks`` (compiled from the real modules), one
    per package, made empty where missing: a folder the grading process fills after the
    sandbox was built is hidden all the same."""
    for package in {p.parent for p in checks_folder().rglob("__init__.py")}:
        try:
            (package / "__pycache__").mkdir(exist_ok=True)
        except OSError:  # a read-only course: nothing is compiled into it either
            pass
    return sorted(p for p in checks_folder().rglob("__pycache__") if p.is_dir())


def inputs_digest() -> str:
    """A digest of everything :func:`views` reads: the course's Python modules (the checks,
    the runtime and guard names they keep, this module) and its source notebooks."""
    import hashlib

    digest = hashlib.sha256()
    files = sorted(course.PACKAGE.rglob("*.py")) + sorted(course.SOLUTIONS.rglob("*.ipynb"))
    for path in files:
        if "__pycache__" in path.parts or course.WORK in path.parents:
            continue
        digest.update(str(path.relative_to(course.REPO)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def cached_views(cache: Path | None = None) -> dict[Path, str]:
    """:func:`views`, kept in ``cache`` (default ``grader/work/.cache``, which kernels never
    see) under :func:`inputs_digest`: the views are built once per version of the course (about
    3 s on 2 cores), not once per class. A cache that cannot be read or written is ignored."""
    import json

    folder = Path(cache or course.WORK / ".cache")
    file = folder / f"kernel_view-{inputs_digest()}.json"
    try:
        return {Path(k): v for k, v in json.loads(file.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        pass
    made = views()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = file.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({str(k): v for k, v in made.items()}))
        partial.replace(file)  # whole or not at all, for classes graded side by side
    except OSError:
        pass
    return made


def build(dest: str | Path) -> dict[str, str]:
    """Write the kernel's view of every checks module under ``dest`` (mirroring
    ``grader/checks``; :func:`cached_views`); return real path -> view path, for the sandbox
    to bind."""
    import json

    dest = Path(dest)
    out: dict[str, str] = {}
    for path, source in cached_views().items():
        target = dest / path.relative_to(checks_folder())
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source)
        out[str(path)] = str(target)
    (dest / INDEX).write_text(json.dumps(out, indent=1))
    return out
