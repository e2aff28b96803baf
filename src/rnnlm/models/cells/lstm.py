"""The LSTM (Leviathan's cell), one slice: readable cell, Python loops, gradient assembly, layer,
sampling advance. Compiled loops in compute's `cpp/lstm.cpp`, Triton loops in `lstm_triton.py`; tests hold all three
to `LSTMCell.advance` in float64 (see `base` for what the loops do and why).

Its state has two entries, (h, c). Gate order in the fused matrices: i, f, o, g.
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
    sigmoid_backward,
    tanh_backward,
)


class LSTMCell(Cell):
    """An LSTM with one bias per gate, on the input side only.

        i = sigmoid(W_xi x + b_i + W_hi h)      f = sigmoid(W_xf x + b_f + W_hf h)
        o = sigmoid(W_xo x + b_o + W_ho h)      g = tanh(W_xg x + b_g + W_hg h)
        c' = f * c + i * g                      h' = o * tanh(c')

    Parameters: 4*I*H + 4*H + 4*H*H.
    """

    gates = 4
    state_entries = 2

    def recur(self, gates_x: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """One time step. gates_x (B, 4H): the input-side pre-activations of i, f, o, g with their biases,
        (h, c) each (B, H) -> (h', c')."""
        h, c = state
        i, f, o, g = (gates_x + h @ self.weight_hh.T).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


# ------------------------------------------------------------------ Python loops (the reference)


def forward(products, h0, c0, weight_hh, bias_ih, masks):
    """products (T, B, 4H), overwritten with the activated gates (i, f, o sigmoid; g tanh); h0, c0 (B, H),
    weight_hh (4H, H), bias_ih (4H), masks? -> hs (T, B, H), cs (T, B, H)."""
    T, B, _ = products.shape
    H = h0.shape[1]
    gates = products
    hh_t = weight_hh.T
    cs = gates.new_empty(T, B, H)
    hs = gates.new_empty(T, B, H)
    h, c = h0, c0
    for a, c_new, h_new, mask in zip(gates.unbind(0), cs.unbind(0), hs.unbind(0), time_steps_of(masks, T)):
        a.add_(bias_ih).addmm_(h, hh_t)  # (B, 4H)
        a[:, : 3 * H].sigmoid_()
        a[:, 3 * H :].tanh_()
        c = torch.mul(a[:, H : 2 * H], c, out=c_new).addcmul_(a[:, :H], a[:, 3 * H :])  # f c + i g
        h = torch.mul(a[:, 2 * H : 3 * H], torch.tanh(c), out=h_new)
        if mask is not None:
            h.mul_(mask)
    return hs, cs


def backward(grad_hs, grad_c_last, c0, weight_hh, gates, cs, masks):
    """grad_hs (T, B, H), grad_c_last (B, H) and what `forward` saved; gates is overwritten with
    their gradients w.r.t. the pre-activations -> grad_h0, grad_c0 (B, H)."""
    T, B, H = cs.shape
    grad_gates = gates
    i, f, o, g = (time_steps_of(gates[..., k * H : (k + 1) * H], T) for k in range(4))
    grad_i, grad_f, grad_o, grad_g = (time_steps_of(grad_gates[..., k * H : (k + 1) * H], T) for k in range(4))
    c_prev, grad_out, mask = (c0, *cs[:-1].unbind(0)), grad_hs.unbind(0), time_steps_of(masks, T)
    grad_h = None
    grad_c = grad_c_last.clone()
    for t in range(T - 1, -1, -1):
        grad = grad_into_state(grad_out[t], grad_h, mask[t])  # (B, H), w.r.t. h
        tanh_c = torch.tanh(cs[t])
        grad_through_o = grad * o[t]
        sigmoid_backward(grad * tanh_c, o[t], grad_input=grad_o[t])
        grad_c += tanh_backward(grad_through_o, tanh_c, grad_input=tanh_c)  # through h = o tanh(c)
        grad_c_i, grad_c_g = grad_c * i[t], grad_c * g[t]
        sigmoid_backward(grad_c_g, i[t], grad_input=grad_i[t])
        tanh_backward(grad_c_i, g[t], grad_input=grad_g[t])
        grad_c_f = grad_c * f[t]
        sigmoid_backward(grad_c * c_prev[t], f[t], grad_input=grad_f[t])
        grad_c = grad_c_f
        grad_h = grad_gates[t] @ weight_hh  # (B, H)
    return grad_h, grad_c


def advance(gates_x, h, c, hh_t):
    """One token: gates_x (B, 4H) with every bias added, h, c (B, H), hh_t (H, 4H) -> the new h and c (B, H)."""
    H = h.shape[1]
    gates = torch.addmm(gates_x, h, hh_t)  # (B, 4H): i, f, o, g
    gates[:, : 3 * H].sigmoid_()
    gates[:, 3 * H :].tanh_()
    c = torch.addcmul(gates[:, H : 2 * H] * c, gates[:, :H], gates[:, 3 * H :])
    return gates[:, 2 * H : 3 * H] * torch.tanh(c), c


# ------------------------------------------------------------------ gradient assembly and layer


class LSTMScan(torch.autograd.Function):
    """The LSTM over T time steps.

    In:  spec (whose loops run); products (T, B, 4H) = x W_ih^T, contiguous, consumed (overwritten
         with the activated gates); h0, c0 (B, H); weight_hh (4H, H); bias_ih (4H); masks or None.
    Out: hs (T, B, H), the h after every time step, the final c (B, H), and the gates (not differentiable).
    """

    @staticmethod
    def forward(ctx, spec, products, h0, c0, weight_hh, bias_ih, masks):
        hs, cs = loops_for(spec, products).forward(products, h0, c0, weight_hh, bias_ih, masks)
        gates = consumed(ctx, products)
        ctx.spec = spec
        ctx.save_for_backward(h0, c0, weight_hh, gates, cs, hs, masks)
        return hs, cs[-1].clone(), gates

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, grad_c_last, _):
        h0, c0, weight_hh, gates, cs, hs, masks = ctx.saved_tensors
        grad_hs, grad_c_last = or_zeros(grad_hs, hs), or_zeros(grad_c_last, c0)
        grad_h0, grad_c0 = loops_for(ctx.spec, hs).backward(grad_hs, grad_c_last, c0, weight_hh, gates, cs, masks)
        grad_gates = overwritten(gates)
        grad_weight_hh = state_weight_gradient(grad_gates, h0, hs)
        return None, grad_gates, grad_h0, grad_c0, grad_weight_hh, grad_gates.sum((0, 1)), None


class LSTMLayer(RecurrentLayer):
    """The LSTM over a sequence."""

    cell_class = LSTMCell

    def _scan(
        self, products: Tensor, state: tuple[Tensor, Tensor], masks: Tensor | None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        c = self.cell
        hs, c_last, _ = LSTMScan.apply(self.spec, products, state[0], state[1], c.weight_hh, c.bias_ih, masks)
        return hs, (hs[-1], c_last)


def triton_loops() -> Loops:
    """The loops CUDA runs: the Triton forward and backward of `lstm_triton.py`, imported only when
    asked (Triton comes with them), and the Python advance by one token (a few cuBLAS calls)."""
    import rnnlm.models.cells.lstm_triton as on_cuda

    return Loops(on_cuda.forward, on_cuda.backward, advance)


SPEC = CellSpec(
    name="lstm",
    layer=LSTMLayer,
    layer_advance=LayerAdvance,
    python_loops=Loops(forward, backward, advance),
    triton_loops=triton_loops,
)
