"""The minimal gated unit (Zhou, Wu, Zhang and Zhou, 2016): the GRU with one gate, f, doing the work of
both r and z. The worked example of adding a cell (docs/layout.md): its maths and its registry entry,
no loops of its own, so autograd runs it on every device."""

import torch
from torch import Tensor

from rnnlm.models.cells.base import Cell, CellSpec, RecurrentLayer


class MGUCell(Cell):
    """f = sigmoid(W_fx x + b_f + W_fh h),  h~ = tanh(W_x x + b_x + W_h (f * h)),  h' = (1 - f) h + f h~.
    Rows of weight_ih, bias_ih and weight_hh: f's, then h~'s. Parameters: 2*I*H + 2*H*H + 2*H."""

    gates = 2

    def recur(self, gates_x: Tensor, h: Tensor) -> Tensor:
        """gates_x (B, 2H) = x W_ih^T + b, h (B, H) -> h' (B, H)."""
        f_x, candidate_x = gates_x.chunk(2, dim=1)
        W_fh, W_h = self.weight_hh.chunk(2)
        f = torch.sigmoid(f_x + h @ W_fh.T)
        candidate = torch.tanh(candidate_x + (f * h) @ W_h.T)
        return (1 - f) * h + f * candidate


class MGULayer(RecurrentLayer):
    cell_class = MGUCell


SPEC = CellSpec(name="mgu", layer=MGULayer, hidden_products=(1, 1))  # f's product, then h~'s (it needs f * h)
