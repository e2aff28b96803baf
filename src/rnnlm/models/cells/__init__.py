"""The registry of recurrent cells: one line per cell.

Adding a cell means adding its slice beside these (`NAME.py` with its cell, loops, autograd Function,
layer and `SPEC`; `NAME.cpp`, which registers its compiled loops under the same name; `NAME_triton.py`)
and one line below. params.yaml's `cell:` choices, the model's layers, the sampling stepper, the C++
build and the equivalence tests all read `CELLS`.
"""

from __future__ import annotations

from rnnlm.models.cells import gru, lstm, rnn
from rnnlm.models.cells.base import CellSpec, RecurrentLayer

CELLS: dict[str, CellSpec] = {
    gru.SPEC.name: gru.SPEC,
    lstm.SPEC.name: lstm.SPEC,
    rnn.SPEC.name: rnn.SPEC,
}

LAYERS: dict[str, type[RecurrentLayer]] = {name: spec.layer for name, spec in CELLS.items()}
"""The layer class for each `cell:` value of params.yaml that names a recurrent cell."""
