"""One layer's weights arranged for sampling, one token at a time (`rnnlm.inference.advancing` runs
them layer by layer): a cell's `CellSpec.layer_advance`, this class unless the cell needs another
layout (the GRU's `GRUAdvance`).
"""

from __future__ import annotations

from torch import Tensor

from rnnlm.compute.products import linear
from rnnlm.models.cells.base import Cell, LayerState, Loops, RecurrentLayer, entries, zeros


class LayerAdvance:
    """One layer's weights arranged for a single token (see `rnnlm.inference.advancing`).

    `input_t` (I, G*H) is a transposed view of the input-side matrix, None for the first layer
    (whose input products come from the folded embedding table); `bias` (G*H) every input-side bias;
    `hidden_t` the hidden-side matrices as transposed views, as the cell's `advance` loop takes them.
    `loops` is the cell's loops for the weights' device; None: the cell's own `recur`."""

    def __init__(self, layer: RecurrentLayer, first: bool, loops: Loops | None):
        cell = layer.cell
        self.cell = cell
        self.hidden_size = layer.hidden_size
        self.state_entries = cell.state_entries
        self.input_t = None if first else cell.weight_ih.T  # (I, G*H)
        self.bias = cell.input_bias().clone()  # (G*H)
        self.hidden_t = self.arrange_hidden(cell)
        self.loops = loops

    @staticmethod
    def arrange_hidden(cell: Cell) -> list[Tensor]:
        """The hidden side as the advance takes it: one transposed view (H, G*H) of a matrix; a vector
        (G*H) as it is."""
        return [cell.weight_hh.T if cell.recurrence == "matrix" else cell.weight_hh]

    def gates_x(self, x: Tensor) -> Tensor:
        """Input-side products (B, G*H), biases included, from the layer below's output x (B, I)."""
        return linear(x, self.input_t.T, self.bias, narrow=True)

    def advance(self, gates_x: Tensor, state: LayerState | None) -> LayerState:
        """gates_x (B, G*H), the layer's state (None: zeros) -> its new state."""
        if state is None:
            state = zeros(self.state_entries, gates_x.shape[0], self.hidden_size, gates_x)
        if self.loops is None:
            return self.cell.recur(gates_x, state)
        new = self.loops.advance(gates_x, *entries(state), *self.hidden_t)  # h, or (h, c)
        return new if isinstance(new, Tensor) else tuple(new)
