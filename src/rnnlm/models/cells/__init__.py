"""The registry of recurrent cells: a function and an entry per cell.

Adding a cell means adding its module beside these (`NAME.py` with its cell's `recur`, its layer and
its `SPEC`; `mgu.py` is the smallest), a three-line function below that imports its `SPEC`, and one
entry in `CELLS`. Loops of its own are optional (Python loops
with an autograd Function in `NAME.py`; Triton ones in `NAME_triton.py`, named in its `SPEC`;
compiled ones in compute's `cpp/NAME.cpp`, which the C++ build compiles with compute's own units and
which registers them in C++ under the same name): without them autograd runs its `recur`.
params.yaml's `cell:` choices, the model's layers, the sampling advancer and the tests all read `CELLS`.

The registry (`registry.Registry`) holds a function per cell that imports its module rather than the
module itself: the cells' names are known without PyTorch, so that the stages that only read
params.yaml's other sections (download, prepare, tokenizer) check every `cell:` without importing
PyTorch (seconds per stage); a cell's module is imported the first time its `CellSpec` is asked for.

The model stages do not depend on this file or on the other cells: the `cell` stage writes the
selected cell's registry entry and the fingerprints of the files its models run
(`Registry.files`) to `models/cell.json`, and train, generate and evaluate depend on that, so adding
or editing another cell leaves them as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rnnlm.models.cells.registry import Registry

if TYPE_CHECKING:
    from rnnlm.models.cells.base import CellSpec


def _gru() -> CellSpec:
    from rnnlm.models.cells.gru import SPEC
    return SPEC


def _lstm() -> CellSpec:
    from rnnlm.models.cells.lstm import SPEC
    return SPEC


def _rnn() -> CellSpec:
    from rnnlm.models.cells.rnn import SPEC
    return SPEC


def _mgu() -> CellSpec:
    from rnnlm.models.cells.mgu import SPEC
    return SPEC


def _indrnn() -> CellSpec:
    from rnnlm.models.cells.indrnn import SPEC
    return SPEC


CELLS = Registry({
    "gru": _gru,
    "lstm": _lstm,
    "rnn": _rnn,
    "mgu": _mgu,
    "indrnn": _indrnn,
})
