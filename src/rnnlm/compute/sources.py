"""The C++ translation units of the compiled module, without PyTorch.

In:  compute's own (`cpp/`: the shared kernels and the cells' registry, generation, the bindings)
     and the files the packages above add with `add` (each cell's loops: `rnnlm.models.cells` adds
     its folder's `NAME.cpp` files when it is imported, before anything can ask for a build).
Out: `units()`, the files to compile in their build order, and `HEADERS`, the header they share.

Every unit includes `kernels.h` by name: the build copies all of them into one folder.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

CPP = Path(__file__).parent / "cpp"
HEADERS = [CPP / "kernels.h"]

_added: list[Path] = []
_frozen = False


def add(paths: Iterable[Path]) -> None:
    """Add translation units (a cell's compiled loops). RuntimeError for a file whose name another
    unit has (the build compiles them in one folder) or one added after the module was built (that
    build would silently lack it)."""
    for path in map(Path, paths):
        if path in _added:
            continue
        if path.name in {unit.name for unit in units()}:
            raise RuntimeError(f"{path}: another C++ source is named {path.name}; expected one name per unit")
        if _frozen:
            raise RuntimeError(f"{path}: added to the compiled module after it was built; expected its package "
                               "imported before the first build")
        _added.append(path)


def units() -> list[Path]:
    """The files to compile: the shared kernels, the added ones (in name order), generation, the bindings."""
    return [CPP / "kernels.cpp", *sorted(_added, key=lambda path: path.name), CPP / "generation.cpp",
            CPP / "bindings.cpp"]


def freeze() -> list[Path]:
    """`units()`, after which `add` refuses more: the build calls it once."""
    global _frozen
    _frozen = True
    return units()
