"""The three cells run over a whole sequence, with a backward pass written by hand.

Autograd over a step loop records every small operation of every step, replays them backwards one
at a time and forms weight gradients step by step. The functions here do less work:

- forward: given the input-side products of all T steps (computed before, in one matrix product
  over T*B rows, or for a first layer as a table lookup), run per step only the hidden-side
  products and the gates' elementwise work. No autograd graph is built; the activated gates are
  kept for the backward pass.
- backward: run the recurrence backwards computing only what the state gradient needs at each
  step (the gate gradients and one or two (B, G*H) x (G*H, H) products), writing each step's gate
  gradients into one (T, B, G*H) buffer, which is also the gradient of the input products; then
  the hidden-side weight gradient is one matrix product over all T*B rows, each bias gradient one
  sum. Autograd takes the gate gradients back through the input products (two large products).

The per-step loops themselves come from `rnnlm.native.scan_loops_for`: compiled C++ on the CPU,
`rnnlm.scan_loops` (Python over ATen calls) on CUDA or when the C++ build is unavailable.

They compute the same functions as the cells' readable `step`s; tests hold both loops to it in
float64, values and every gradient, with and without dropout masks (T, B, H), which multiply each
step's new h.

Shapes: T steps, B batch, H hidden units, G gates. Inputs and outputs are time-major.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from rnnlm.native import scan_loops_for

def _state_weight_gradient(grad_gates: Tensor, h0: Tensor, hs: Tensor) -> Tensor:
    """Sum over steps of grad_gates[t]^T h_prev[t], h_prev = h0, hs[0], ..., hs[T-2]: (G', H).
    Two products instead of one, so that h0 and hs need not be copied into one array."""
    T, B, H = hs.shape
    first = grad_gates[0].T @ h0  # (G', H)
    if T == 1:
        return first
    later = grad_gates[1:].reshape((T - 1) * B, -1)
    return torch.addmm(first, later.T, hs[:-1].reshape((T - 1) * B, H))


def _consumed(ctx, products: Tensor) -> Tensor:
    """Tell autograd that forward wrote the gates over `products` (an input): it is returned as an
    output, marked dirty so that autograd knows, and not differentiable (its gradient is not used)."""
    ctx.mark_dirty(products)
    ctx.mark_non_differentiable(products)
    ctx.set_materialize_grads(False)  # no zero-filled (T, B, G*H) gradient for the gates output
    return products


def _or_zeros(grad: Tensor | None, like: Tensor) -> Tensor:
    """An output's gradient, or zeros when autograd passes None (that output was not used)."""
    return torch.zeros_like(like) if grad is None else grad


def _overwritten(gates: Tensor) -> Tensor:
    """After a backward wrote the gate gradients over the saved gates: bump their version, so that
    a second backward through the same graph (retain_graph=True) fails loudly instead of reading
    gradients as gates."""
    torch.autograd.graph.increment_version(gates)
    return gates


class GRUScan(torch.autograd.Function):
    """The study's GRU (reset gate applied to h before W_h) over T steps.

    In:  products (T, B, 3H) = x W_ih^T for r, z, candidate, contiguous, consumed: overwritten
         with the activated gates; h0 (B, H); weight_hh (3H, H); bias_ih (3H); bias_rz (2H);
         masks (T, B, H) or None.
    Out: hs (T, B, H), the state after every step (the last one is the final state), and the
         gates (the products tensor itself, not differentiable).
    """

    @staticmethod
    def forward(ctx, products, h0, weight_hh, bias_ih, bias_rz, masks):
        hs, reset_h = scan_loops_for(products).gru_forward(products, h0, weight_hh, bias_ih, bias_rz, masks)
        gates = _consumed(ctx, products)
        ctx.save_for_backward(h0, weight_hh, gates, reset_h, hs, masks)
        return hs, gates

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, _):
        h0, weight_hh, gates, reset_h, hs, masks = ctx.saved_tensors
        T, B, H = hs.shape
        grad_hs = _or_zeros(grad_hs, hs)
        grad_h0 = scan_loops_for(hs).gru_backward(grad_hs, h0, weight_hh, gates, hs, masks)
        grad_gates = _overwritten(gates)
        grad_weight_hh = torch.cat(
            [
                _state_weight_gradient(grad_gates[..., : 2 * H], h0, hs),
                grad_gates[..., 2 * H :].reshape(T * B, H).T @ reset_h.view(T * B, H),
            ]
        )
        grad_bias_ih = grad_gates.sum((0, 1))
        # bias_rz's gradient is bias_ih's r and z part, copied so the two .grad tensors never share memory.
        return grad_gates, grad_h0, grad_weight_hh, grad_bias_ih, grad_bias_ih[: 2 * H].clone(), None


class LSTMScan(torch.autograd.Function):
    """The LSTM (gates i, f, o, g; biases on the input side only) over T steps.

    In:  products (T, B, 4H) = x W_ih^T, contiguous, consumed (overwritten with the activated gates);
         h0, c0 (B, H); weight_hh (4H, H); bias_ih (4H); masks or None.
    Out: hs (T, B, H), the h after every step, the final c (B, H), and the gates (not differentiable).
    """

    @staticmethod
    def forward(ctx, products, h0, c0, weight_hh, bias_ih, masks):
        hs, cs = scan_loops_for(products).lstm_forward(products, h0, c0, weight_hh, bias_ih, masks)
        gates = _consumed(ctx, products)
        ctx.save_for_backward(h0, c0, weight_hh, gates, cs, hs, masks)
        return hs, cs[-1].clone(), gates

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, grad_c_last, _):
        h0, c0, weight_hh, gates, cs, hs, masks = ctx.saved_tensors
        grad_hs, grad_c_last = _or_zeros(grad_hs, hs), _or_zeros(grad_c_last, c0)
        loops = scan_loops_for(hs)
        grad_h0, grad_c0 = loops.lstm_backward(grad_hs, grad_c_last, c0, weight_hh, gates, cs, masks)
        grad_gates = _overwritten(gates)
        grad_weight_hh = _state_weight_gradient(grad_gates, h0, hs)
        return grad_gates, grad_h0, grad_c0, grad_weight_hh, grad_gates.sum((0, 1)), None


class RNNScan(torch.autograd.Function):
    """The tanh RNN over T steps.

    In:  products (T, B, H) = x W_ih^T, contiguous, consumed (overwritten with the activations);
         h0 (B, H); weight_hh (H, H); bias_ih (H); masks or None.
    Out: hs (T, B, H), the state after every step, and the activations (not differentiable).
    """

    @staticmethod
    def forward(ctx, products, h0, weight_hh, bias_ih, masks):
        hs = scan_loops_for(products).rnn_forward(products, h0, weight_hh, bias_ih, masks)
        activations = _consumed(ctx, products)
        ctx.save_for_backward(h0, weight_hh, activations, hs, masks)
        return hs, activations

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, _):
        h0, weight_hh, activations, hs, masks = ctx.saved_tensors
        grad_hs = _or_zeros(grad_hs, hs)
        grad_h0 = scan_loops_for(hs).rnn_backward(grad_hs, weight_hh, activations, masks)
        grad_pre = _overwritten(activations)
        grad_weight_hh = _state_weight_gradient(grad_pre, h0, hs)
        return grad_pre, grad_h0, grad_weight_hh, grad_pre.sum((0, 1)), None
