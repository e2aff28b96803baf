"""The registry of recurrent cells: one line per cell.

Adding a cell means adding its module beside these (`NAME.py` with its cell's `recur`, its layer and
its `SPEC`; `mgu.py` is the smallest) and one line below. Loops of its own are optional (Python loops
with an autograd Function in `NAME.py`, compiled ones in `NAME.cpp`, which the C++ build finds and
which registers them under the same name, Triton ones in `NAME_triton.py`, named in its `SPEC`):
without them autograd runs its `recur`. params.yaml's `cell:` choices, the model's layers, the
sampling stepper and the tests all read `CELLS`.

The registry names each cell's module rather than importing it: the cells' names are known without
PyTorch, so that the stages that only read params.yaml's other sections (download, prepare,
tokenizer) check every `cell:` without importing PyTorch (seconds per stage); a cell's module is
imported the first time its `CellSpec` is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rnnlm.models.cells.base import CellSpec


class Registry(MutableMapping[str, "CellSpec"]):
    """Cell name (params.yaml's `cell:`) -> its `CellSpec`, imported from the cell's module on first use.

    In: {name: module path}, the module defining `SPEC` with that name. A spec can also be added as
    it is (`CELLS[spec.name] = spec`: a cell defined outside the library, as the tests do)."""

    def __init__(self, modules: dict[str, str]):
        self._modules = dict(modules)
        self._specs: dict[str, CellSpec] = {}

    def __getitem__(self, name: str) -> CellSpec:
        if name not in self._specs:
            spec = importlib.import_module(self._modules[name]).SPEC  # KeyError for an unknown name
            if spec.name != name:
                raise RuntimeError(f"the registry names {self._modules[name]} 'cell: {name}', but its SPEC is {spec.name!r}")
            self._specs[name] = spec
        return self._specs[name]

    def __setitem__(self, name: str, spec: CellSpec) -> None:
        if spec.name != name:
            raise ValueError(f"a CellSpec named {spec.name!r} registered as {name!r}; expected the same name")
        self._modules[name] = spec.layer.__module__
        self._specs[name] = spec

    def module(self, name: str) -> str:
        """The module that defines cell `name`, without importing it."""
        return self._modules[name]

    def __delitem__(self, name: str) -> None:
        del self._modules[name]
        self._specs.pop(name, None)

    def __contains__(self, name: object) -> bool:  # without importing the cell
        return name in self._modules

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


CELLS = Registry({
    "gru": "rnnlm.models.cells.gru",
    "lstm": "rnnlm.models.cells.lstm",
    "rnn": "rnnlm.models.cells.rnn",
    "mgu": "rnnlm.models.cells.mgu",
})
