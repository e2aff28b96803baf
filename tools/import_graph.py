"""The library files a script runs: its `rnnlm` imports, followed through the library (imports
inside functions included), the C++ sources that `rnnlm.compute.build` compiles when it is reached,
and the data files a reached module reads beside itself (`READS`)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SRC = REPO_ROOT / "src"

PACKAGES = ("rnnlm", "rnnlm_study")
"""The packages under src/: the library, and the study beside it (which imports the library)."""
REGISTRY = "rnnlm.models.cells"
READS = {"rnnlm.compute.gemm_table": ("gemm_table.json",)}
"""Module -> the data files it reads from its own folder: what it computes changes with them."""

def module_file(name: str) -> Path | None:
    """The file of module `name` under src/, or None when it is not a library module."""
    base = SRC / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _imported(path: Path, package: str, typing: bool = False) -> set[str]:
    """The modules of src/ (library and study) that `path` imports, at its top or inside its functions; those under
    `if TYPE_CHECKING:`, which never run, only with `typing`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {id(sub) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)
                   for sub in ast.walk(node)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}  # `from pkg import module`
    return {name for name in names if name.split(".")[0] in PACKAGES and module_file(name)}


def compiled_files() -> set[Path]:
    """The C++ files the compiled module is built from (its units and header), as files of this
    checkout's src/, whichever copy of the package the import found."""
    import rnnlm
    from rnnlm.compute import sources

    package = Path(rnnlm.__file__).parent
    return {SRC / "rnnlm" / path.relative_to(package) for path in (*sources.units(), *sources.HEADERS)}


def library_files(script: Path, specs: bool = True) -> set[Path]:
    """Every library file that running `script` can execute. `specs=False`: for a script that reads
    the cell registry's names but never asks it for a cell (the registry then imports no cell)."""
    seen: set[str] = set()
    todo = [(None, name) for name in _imported(script, "")]
    while todo:
        parent, name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        # importing a.b.c runs a/__init__ and a/b/__init__ first
        parts = name.split(".")
        todo += [(None, ".".join(parts[:i])) for i in range(1, len(parts))]
        path = module_file(name)
        package = name if path.name == "__init__.py" else ".".join(parts[:-1])
        children = _imported(path, package)
        if name == REGISTRY and not specs:  # its functions import the cells' modules only when a spec is asked for
            from rnnlm.models.cells import CELLS  # names only: imports no cell

            children -= {CELLS.module(cell) for cell in CELLS}
        todo += [(name, child) for child in children]
    files = {module_file(name) for name in seen}
    files |= {module_file(name).parent / data for name in seen & READS.keys() for data in READS[name]}
    if "rnnlm.compute.build" in seen:
        files |= compiled_files()
    return files


def _module_name(path: Path) -> tuple[str, str]:
    """(module name, package it resolves relative imports against) of a file under src/."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return ".".join(parts), ".".join(parts)
    return ".".join(parts), ".".join(parts[:-1])


def module_graph() -> dict[str, set[str]]:
    """Module of src/ (library or study) -> the modules of src/ it imports (type-only imports included: a circle drawn
    through them is still one a reader has to untangle)."""
    graph = {}
    for path in SRC.rglob("*.py"):
        name, package = _module_name(path)
        graph[name] = {child for child in _imported(path, package, typing=True) if child != name}
    return graph


def import_cycles() -> list[list[str]]:
    """Every cycle of imports among the library's modules (a strongly connected group of two or
    more), each as its sorted module names."""
    return _cycles(module_graph())


def _package(module: str) -> str | None:
    """The subpackage a module belongs to (rnnlm.models.cells.gru -> rnnlm.models,
    rnnlm_study.judging.stats -> rnnlm_study.judging), None for the top-level modules (rnnlm.errors,
    rnnlm.params, rnnlm_study.cli, ...)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and (SRC / parts[0] / parts[1]).is_dir() else None


def package_cycles() -> list[list[str]]:
    """Every cycle among rnnlm's subpackages (data, models, inference, training, evaluation, ...): a
    package that imports, through others, one that imports it."""
    graph: dict[str, set[str]] = {}
    for module, children in module_graph().items():
        here = _package(module)
        if here is not None:
            graph.setdefault(here, set()).update(p for p in map(_package, children) if p not in (None, here))
    return _cycles(graph)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more nodes of `graph`, each sorted."""
    order, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node: str) -> None:  # Tarjan's algorithm
        order[node] = low[node] = len(order)
        stack.append(node)
        on_stack.add(node)
        for child in graph.get(node, ()):
            if child not in order:
                visit(child)
                low[node] = min(low[node], low[child])
            elif child in on_stack:
                low[node] = min(low[node], order[child])
        if low[node] == order[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return groups
