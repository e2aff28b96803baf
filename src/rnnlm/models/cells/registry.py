"""The cell registry's machinery: name -> the function that imports its module, called on first use,
and the files a cell's models run (what the `cell` stage fingerprints). The table itself is
`rnnlm.models.cells.CELLS`."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING

from rnnlm.compute import sources

if TYPE_CHECKING:
    from rnnlm.models.cells.base import CellSpec

FOLDER = Path(__file__).parent
PACKAGE = "rnnlm.models.cells"
SHARED = ("registry.py", "base.py", "contract.py", "layer_advance.py", "triton_common.py")
"""What every cell's models run from this folder: the machinery, the layers' scan and advancer and
the Triton helpers (the compiled loops' shared kernels are `rnnlm.compute`'s)."""


class Registry(MutableMapping[str, "CellSpec"]):
    """Cell name (params.yaml's `cell:`) -> its `CellSpec`, loaded on first use.

    In: {name: a function returning the `SPEC` of the module `rnnlm.models.cells.NAME`, which it
    imports}. A spec can also be added as it is (`CELLS[spec.name] = spec`: a cell defined outside
    the library, as the tests do)."""

    def __init__(self, loaders: dict[str, Callable[[], CellSpec]]):
        self._loaders = dict(loaders)
        self._modules = {name: f"{PACKAGE}.{name}" for name in loaders}
        self._specs: dict[str, CellSpec] = {}

    def __getitem__(self, name: str) -> CellSpec:
        if name not in self._specs:
            spec = self._loaders[name]()  # KeyError for an unknown name
            if spec.name != name or spec.layer.__module__ != self._modules[name]:
                raise RuntimeError(f"the registry names {self._modules[name]} 'cell: {name}', "
                                   f"but its loader gave {spec.layer.__module__}'s {spec.name!r}")
            self._specs[name] = spec
        return self._specs[name]

    def __setitem__(self, name: str, spec: CellSpec) -> None:
        if spec.name != name:
            raise ValueError(f"a CellSpec named {spec.name!r} registered as {name!r}; expected the same name")
        self._modules[name] = spec.layer.__module__
        self._loaders[name] = lambda: spec
        self._specs[name] = spec

    def module(self, name: str) -> str:
        """The module that defines cell `name`, without importing it."""
        return self._modules[name]

    def files(self, name: str) -> list[Path]:
        """The files that a model of cell `name` runs: its module `NAME.py` and its Triton loops
        `NAME_triton.py` in this folder, its compiled loops in compute's (`rnnlm.compute.sources.cell_unit`)
        where it has them, and the shared ones of this folder (`SHARED`). Other cells' files are not among them. ValueError for a cell whose
        module lives elsewhere (one registered at run time, as the tests do)."""
        module = self._modules[name]
        if module.rpartition(".")[0] != PACKAGE:
            raise ValueError(f"cell {name!r} is defined in {module}, outside {PACKAGE}: it has no files here")
        stem = module.rpartition(".")[2]
        own = [FOLDER / f"{stem}.py", sources.cell_unit(stem), FOLDER / f"{stem}_triton.py"]
        return sorted(path for path in (*own, *(FOLDER / shared for shared in SHARED)) if path.exists())

    def fingerprint(self, name: str) -> dict[str, object]:
        """What the model stages depend on for cell `name`, without importing it: its registry entry
        and the sha256 of each of its `files`, by path under src/ (the same in every checkout)."""
        src = FOLDER.parents[2]
        return {"cell": name, "module": self._modules[name],
                "files": {path.relative_to(src).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
                          for path in self.files(name)}}

    def __delitem__(self, name: str) -> None:
        del self._modules[name]
        del self._loaders[name]
        self._specs.pop(name, None)

    def __contains__(self, name: object) -> bool:  # without importing the cell
        return name in self._modules

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)
