"""The plain (Elman) tanh RNN, the recurrent baseline, one slice: readable cell, Python loops,
gradient assembly, layer. Compiled loops in compute's `cpp/rnn.cpp`, Triton loops in `rnn_triton.py`; tests hold
all three to `RNNCell.advance` in float64 (see `base` for what the loops do and why).
"""

from __future__ import annotations


import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from rnnlm.models.cells.layer_advance import LayerAdvance
from rnnlm.models.cells.base import (
    Cell,
    CellSpec,
    Loops,
    RecurrentLayer,
    consumed,
    grad_into_state,
    loops_for,
    or_zeros,
    overwritten,
    state_weight_gradient,
    time_steps_of,
    tanh_backward,
)


class RNNCell(Cell):
    """h' = tanh(W_x x + b + W_h h). Parameters: I*H + H + H*H."""

    gates = 1

    def recur(self, gates_x: Tensor, h: Tensor) -> Tensor:
        """One time step. gates_x (B, H) = W_x x + b, h (B, H) -> h' (B, H)."""
        return torch.tanh(gates_x + h @ self.weight_hh.T)


# ------------------------------------------------------------------ Python loops (the reference)


def forward(products, h0, weight_hh, bias_ih, masks):
    """products (T, B, H), overwritten with the activations tanh(...); h0 (B, H), weight_hh (H, H),
    bias_ih (H), masks? -> hs (T, B, H), the activations times the masks."""
    T = products.shape[0]
    activations = products
    hs = torch.empty_like(activations)
    hh_t = weight_hh.T
    h = h0
    for a, h_new, mask in zip(activations.unbind(0), hs.unbind(0), time_steps_of(masks, T)):
        a.add_(bias_ih).addmm_(h, hh_t).tanh_()
        h = torch.mul(a, mask, out=h_new) if mask is not None else h_new.copy_(a)
    return hs


def backward(grad_hs, weight_hh, activations, masks):
    """grad_hs (T, B, H) and what `forward` saved; activations is overwritten with the gradient
    w.r.t. the pre-activations -> grad_h0 (B, H)."""
    T = activations.shape[0]
    grad_pre = activations
    a, grad_a, grad_out, mask = activations.unbind(0), grad_pre.unbind(0), grad_hs.unbind(0), time_steps_of(masks, T)
    grad_h = None
    for t in range(T - 1, -1, -1):
        grad = grad_into_state(grad_out[t], grad_h, mask[t])
        grad_h = tanh_backward(grad, a[t], grad_input=grad_a[t]) @ weight_hh
    return grad_h


def advance(gates_x, h, hh_t):
    """One token: gates_x (B, H) with the bias added, h (B, H), hh_t (H, H) -> the new h (B, H)."""
    return torch.addmm(gates_x, h, hh_t).tanh_()


# ------------------------------------------------------------------ gradient assembly and layer


class RNNScan(torch.autograd.Function):
    """A one-state, one-gate cell over T time steps: the tanh RNN, or any cell of that shape with loops of
    its own (the spec says whose loops run).

    In:  spec; products (T, B, H) = x W_ih^T, contiguous, consumed (overwritten with the activations);
         h0 (B, H); weight_hh (H, H); bias_ih (H); masks or None.
    Out: hs (T, B, H), the state after every time step, and the activations (not differentiable).
    """

    @staticmethod
    def forward(ctx, spec, products, h0, weight_hh, bias_ih, masks):
        hs = loops_for(spec, products).forward(products, h0, weight_hh, bias_ih, masks)
        activations = consumed(ctx, products)
        ctx.spec = spec
        ctx.save_for_backward(h0, weight_hh, activations, hs, masks)
        return hs, activations

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, _):
        h0, weight_hh, activations, hs, masks = ctx.saved_tensors
        grad_hs = or_zeros(grad_hs, hs)
        grad_h0 = loops_for(ctx.spec, hs).backward(grad_hs, weight_hh, activations, masks)
        grad_pre = overwritten(activations)
        grad_weight_hh = state_weight_gradient(grad_pre, h0, hs)
        return None, grad_pre, grad_h0, grad_weight_hh, grad_pre.sum((0, 1)), None


class RNNLayer(RecurrentLayer):
    """The tanh RNN over a sequence (a one-state cell's layer: a subclass names another cell)."""

    cell_class = RNNCell

    def _scan(self, products: Tensor, h: Tensor, masks: Tensor | None) -> tuple[Tensor, Tensor]:
        hs, _ = RNNScan.apply(self.spec, products, h, self.cell.weight_hh, self.cell.bias_ih, masks)
        return hs, hs[-1]


def triton_loops() -> Loops:
    """The loops CUDA runs: the Triton forward and backward of `rnn_triton.py`, imported only when
    asked (Triton comes with them), and the Python advance by one token (a few cuBLAS calls)."""
    import rnnlm.models.cells.rnn_triton as on_cuda

    return Loops(on_cuda.forward, on_cuda.backward, advance)


SPEC = CellSpec(
    name="rnn",
    layer=RNNLayer,
    layer_advance=LayerAdvance,
    python_loops=Loops(forward, backward, advance),
    triton_loops=triton_loops,
)
