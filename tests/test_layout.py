"""The house's layout: ``grader/`` is split into parts whose imports only go down.

From the bottom: ``runtime`` (what notebooks and checks run on) < ``checks`` (what test cells
call) < ``grading`` (the trusted engine) < ``tools`` (the instructor's and developer's tools) <
``deploy`` (the course on JupyterHub; its other files are recipes) < ``grader/__main__.py``
(the command line). Every import is counted, also one inside a function,
and no two modules may import each other, directly or through others.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from grader.runtime import course

PACKAGE = course.PACKAGE
LAYERS = ["runtime", "checks", "grading", "tools", "deploy", "__main__"]
#: What ``grader/`` itself holds: the parts, the command line, and the two configuration files
#: Jupyter and nbgrader read from ``JUPYTER_CONFIG_PATH=grader`` (they must stay in this folder).
TOP_LEVEL = {
    "__init__.py",
    "__main__.py",
    "nbgrader_config.py",
    "jupyter_server_config.py",
    "runtime",
    "checks",
    "grading",
    "tools",
    "samples",
    "deploy",
}


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (not the sample submissions)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if rel.parts[1] == "samples":
            continue
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _layer(module: str) -> int | None:
    """The layer's rank of a dotted module name; None for ``grader`` itself and its config files."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    name = parts[1]
    return LAYERS.index(name) if name in LAYERS else None


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The course's modules that ``path`` imports anywhere in its code (resolved to modules)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()

    def add(name: str) -> None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            found.add(name)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("grader"):
                    add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import; the course imports by full name"
            if node.module and node.module.startswith("grader"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    add(full if full in modules else node.module)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    names = set(modules)
    return {m: _imports(p, names) - {m, "grader"} for m, p in modules.items()}


def test_grader_folder_shows_its_parts():
    present = {p.name for p in PACKAGE.iterdir() if p.name not in {"__pycache__", "work"}}
    assert present == TOP_LEVEL, (
        f"grader/ holds {sorted(present - TOP_LEVEL)} beyond its parts, or lacks "
        f"{sorted(TOP_LEVEL - present)}: a module belongs in one of {LAYERS[:-1]}"
    )
    for part in LAYERS[:-1]:
        doc = ast.get_docstring(ast.parse((PACKAGE / part / "__init__.py").read_text()))
        assert doc and "May import" in doc, f"grader/{part}/__init__.py must say what it may import"


def test_every_module_has_a_docstring():
    for name, path in _modules().items():
        assert ast.get_docstring(ast.parse(path.read_text())), f"{name} has no module docstring"


def test_imports_only_go_down(graph):
    up = []
    for module, deps in graph.items():
        mine = _layer(module)
        if mine is None:
            continue
        for dep in deps:
            theirs = _layer(dep)
            if theirs is not None and theirs > mine:
                up.append(f"{module} imports {dep} ({LAYERS[mine]} -> {LAYERS[theirs]})")
    assert not up, "imports that go up a level:\n  " + "\n  ".join(sorted(up))


def test_no_import_cycle(graph):
    """Tarjan's strongly connected components: any with two or more modules is a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_layering_test_sees_an_upward_import(tmp_path):
    """The checks above can fail: an import from checks up into grading is found."""
    bad = tmp_path / "bad.py"
    bad.write_text('"""x"""\n\ndef f():\n    from grader.grading import judge\n')
    names = set(_modules())
    assert _imports(bad, names) == {"grader.grading.judge"}
    assert _layer("grader.grading.judge") > _layer("grader.checks.ch01_devices")


def test_notebooks_import_only_checks_and_runtime():
    """A notebook (solution or student copy) or a sample submission reaches the course through
    the checks and the runtime, never the grading engine or the tools, and only by module paths
    that exist (no shims)."""
    names = set(_modules())
    sources = []  # (path, code) of every notebook code cell and every sample submission
    for folder in (course.SOLUTIONS, course.NOTEBOOKS):
        for path in sorted(folder.glob("*/*.ipynb")):
            for cell in json.loads(path.read_text())["cells"]:
                if cell["cell_type"] == "code":
                    sources.append((path, "".join(cell["source"])))
    sources += [(p, p.read_text()) for p in sorted((PACKAGE / "samples").rglob("*.py"))]
    wrong = []
    for path, text in sources:
        lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:  # a cell of shell or cell magics only
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods = [node.module]
            else:
                continue
            for m in mods:
                if m.startswith("grader") and (m not in names or _layer(m) not in (0, 1)):
                    wrong.append(f"{path.relative_to(course.REPO)} imports {m}")
    assert not wrong, "\n".join(wrong)


def test_the_command_line_answers_help_without_importing_torch_or_nbgrader():
    """``python -m grader --help`` (and a usage error) answers at once: each command imports
    what it needs inside its own function (issue 38: under 2 s; 0.06 s on 2026-11-28)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from grader.__main__ import build_parser\n"
        "parser = build_parser()\n"
        "parser.format_help()\n"
        "print(sorted(m for m in ('torch', 'nbgrader', 'nbformat') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=course.REPO, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_demo_commands_sample_classes_are_the_samples_module_s():
    from grader.__main__ import build_parser
    from grader.tools import samples

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "func" or a.choices and "demo" in a.choices)
    demo = sub.choices["demo"]
    option = next(a for a in demo._actions if a.dest == "sample_class")
    assert tuple(option.choices) == samples.CLASSES
