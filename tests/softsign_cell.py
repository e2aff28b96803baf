"""A cell that lives in the tests, not in the library: a softsign RNN, h' = s / (1 + |s|) with
s = W_x x + b + W_h h.

It has what a cell must have (its readable `step`, its Python loops, its autograd Function, its
layer and its `CellSpec`) and nothing else: no `.cpp` file, no Triton module. `tests/conftest.py`
adds it to the registry with one line, so every test that runs "each cell" runs it too, on its
Python loops, which is what a new cell without compiled loops gets.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from rnnlm.models.cells.base import (Cell, CellSpec, LayerStep, Loops, RecurrentLayer, consumed, grad_into_state,
                                     loops_for, or_zeros, overwritten, state_weight_gradient, steps_of)


def softsign_(s: Tensor) -> Tensor:
    """s / (1 + |s|), in place."""
    return s.div_(s.abs().add_(1))


class SoftsignCell(Cell):
    """h' = softsign(W_x x + b + W_h h). Parameters: I*H + H + H*H."""

    gates = 1

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.reset_parameters()

    def step(self, x: Tensor, h: Tensor) -> Tensor:
        s = x @ self.weight_ih.T + self.bias_ih + h @ self.weight_hh.T
        return s / (1 + s.abs())


def forward(products, h0, weight_hh, bias_ih, masks):
    """products (T, B, H), overwritten with the activations; -> hs (T, B, H), times the masks."""
    hs = torch.empty_like(products)
    h = h0
    for a, h_new, mask in zip(products.unbind(0), hs.unbind(0), steps_of(masks, products.shape[0])):
        softsign_(a.add_(bias_ih).addmm_(h, weight_hh.T))
        h = torch.mul(a, mask, out=h_new) if mask is not None else h_new.copy_(a)
    return hs


def backward(grad_hs, weight_hh, activations, masks):
    """Overwrites the activations with the pre-activations' gradient -> grad_h0 (B, H)."""
    T = activations.shape[0]
    a, grad_out, mask = activations.unbind(0), grad_hs.unbind(0), steps_of(masks, T)
    grad_h = None
    for t in range(T - 1, -1, -1):
        grad = grad_into_state(grad_out[t], grad_h, mask[t])
        a[t].copy_(grad * (1 - a[t].abs()).square())  # softsign'(s) = (1 - |softsign(s)|)^2
        grad_h = a[t] @ weight_hh
    return grad_h


def step(gates_x, h, hh_t):
    return softsign_(torch.addmm(gates_x, h, hh_t))


class SoftsignScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, products, h0, weight_hh, bias_ih, masks):
        hs = loops_for(SPEC, products).forward(products, h0, weight_hh, bias_ih, masks)
        activations = consumed(ctx, products)
        ctx.save_for_backward(h0, weight_hh, activations, hs, masks)
        return hs, activations

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, _):
        h0, weight_hh, activations, hs, masks = ctx.saved_tensors
        grad_h0 = loops_for(SPEC, hs).backward(or_zeros(grad_hs, hs), weight_hh, activations, masks)
        grad_pre = overwritten(activations)
        return grad_pre, grad_h0, state_weight_gradient(grad_pre, h0, hs), grad_pre.sum((0, 1)), None


class SoftsignLayer(RecurrentLayer):
    cell_class = SoftsignCell

    def _scan(self, products: Tensor, h: Tensor, masks: Tensor | None) -> tuple[Tensor, Tensor]:
        hs, _ = SoftsignScan.apply(products, h, self.cell.weight_hh, self.cell.bias_ih, masks)
        return hs, hs[-1]


SPEC = CellSpec(name="softsign_rnn", layer=SoftsignLayer, layer_step=LayerStep, python_loops=Loops(forward, backward, step))
