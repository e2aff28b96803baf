"""The registry of recurrent cells: one line per cell.

Adding a cell means adding its slice beside these (`NAME.py` with its cell, loops, autograd Function,
layer and `SPEC`) and one line below; its compiled loops (`NAME.cpp`, which the C++ build finds and
which registers them under the same name) and its Triton loops (`NAME_triton.py`, named in its
`SPEC`) are optional: without them it runs its Python loops there, with one note saying so.
params.yaml's `cell:` choices, the model's layers, the sampling stepper and the tests all read
`CELLS`.
"""

from __future__ import annotations

from rnnlm.models.cells import gru, lstm, rnn
from rnnlm.models.cells.base import CellSpec

CELLS: dict[str, CellSpec] = {
    gru.SPEC.name: gru.SPEC,
    lstm.SPEC.name: lstm.SPEC,
    rnn.SPEC.name: rnn.SPEC,
}
