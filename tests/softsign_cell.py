"""A cell that lives in the tests, not in the library: a softsign RNN, h' = s / (1 + |s|) with
s = W_x x + b + W_h h.

It has a cell's maths (`recur`) and, as a cell may, hand-written Python loops, its layer and its
`CellSpec` (having the tanh RNN's shape, its layer reuses that one's autograd Function), and nothing
else: no `.cpp` file, no Triton module. `tests/conftest.py` adds it to the registry with one line,
so every test that runs "each cell" runs it too, on its Python loops, which is what a cell with
loops but no compiled ones gets. (`mgu`, in the library, is a cell with no loops at all.)
"""

from __future__ import annotations

import torch
from torch import Tensor

from rnnlm.models.cells.layer_advance import LayerAdvance
from rnnlm.models.cells.base import CellSpec, Loops, grad_into_state, time_steps_of
from rnnlm.models.cells.rnn import RNNCell, RNNLayer


def softsign_(s: Tensor) -> Tensor:
    """s / (1 + |s|), in place."""
    return s.div_(s.abs().add_(1))


class SoftsignCell(RNNCell):
    """h' = softsign(W_x x + b + W_h h): the tanh RNN's parameters (I*H + H + H*H), another squashing."""

    def recur(self, gates_x: Tensor, h: Tensor) -> Tensor:
        s = gates_x + h @ self.weight_hh.T
        return s / (1 + s.abs())


def forward(products, h0, weight_hh, bias_ih, masks):
    """products (T, B, H), overwritten with the activations; -> hs (T, B, H), times the masks."""
    hs = torch.empty_like(products)
    h = h0
    for a, h_new, mask in zip(products.unbind(0), hs.unbind(0), time_steps_of(masks, products.shape[0])):
        softsign_(a.add_(bias_ih).addmm_(h, weight_hh.T))
        h = torch.mul(a, mask, out=h_new) if mask is not None else h_new.copy_(a)
    return hs


def backward(grad_hs, weight_hh, activations, masks):
    """Overwrites the activations with the pre-activations' gradient -> grad_h0 (B, H)."""
    T = activations.shape[0]
    a, grad_out, mask = activations.unbind(0), grad_hs.unbind(0), time_steps_of(masks, T)
    grad_h = None
    for t in range(T - 1, -1, -1):
        grad = grad_into_state(grad_out[t], grad_h, mask[t])
        a[t].copy_(grad * (1 - a[t].abs()).square())  # softsign'(s) = (1 - |softsign(s)|)^2
        grad_h = a[t] @ weight_hh
    return grad_h


def advance(gates_x, h, hh_t):
    return softsign_(torch.addmm(gates_x, h, hh_t))


class SoftsignLayer(RNNLayer):
    """The RNN's layer and autograd Function (one state, one gate), with this cell's loops."""

    cell_class = SoftsignCell


SPEC = CellSpec(name="softsign_rnn", layer=SoftsignLayer, layer_advance=LayerAdvance,
                python_loops=Loops(forward, backward, advance))
