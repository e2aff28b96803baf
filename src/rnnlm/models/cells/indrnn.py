"""The independently recurrent network (Li, Li, Cook, Zhu and Gao, 2018): each unit reads back only
its own previous value, through one weight of its own, and the output is a ReLU. The worked example
of a cell with a vector recurrence (docs/layout.md): its maths and its registry entry, no loops of
its own, so autograd runs it on every device."""

import torch
from torch import Tensor

from rnnlm.models.cells.base import Cell, CellSpec, RecurrentLayer


class IndRNNCell(Cell):
    """h' = relu(W x + b + u * h): `weight_hh` is the vector u (H), not a matrix.
    Parameters: I*H + 2*H."""

    gates = 1
    recurrence = "vector"

    def recur(self, gates_x: Tensor, h: Tensor) -> Tensor:
        """gates_x (B, H) = x W_ih^T + b, h (B, H) -> h' (B, H)."""
        return torch.relu(gates_x + self.weight_hh * h)


class IndRNNLayer(RecurrentLayer):
    cell_class = IndRNNCell


SPEC = CellSpec(name="indrnn", layer=IndRNNLayer)
