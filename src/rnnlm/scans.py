"""The three cells run over a whole sequence, with a backward pass written by hand.

Autograd over a step loop records every small operation of every step, replays them backwards one
at a time and forms weight gradients step by step. The functions here do less work:

- forward: given the input-side products of all T steps (computed before, in one matrix product
  over T*B rows, or for a first layer as a table lookup), run per step only the hidden-side
  products, added in place to the step's rows and activated in place. No autograd graph is built;
  the activated gates are kept for the backward pass.
- backward: run the recurrence backwards computing only what the state gradient needs at each
  step (the gate gradients and one or two (B, G*H) x (G*H, H) products), writing each step's gate
  gradients into one (T, B, G*H) buffer, which is also the gradient of the input products; then
  the hidden-side weight gradient is one matrix product over all T*B rows, each bias gradient one
  sum. Autograd takes the gate gradients back through the input products (two large products).

All elementwise work happens per step, on (B, H) slices that stay in cache: on a CPU, a few passes
over a (B, H) slice cost far less than the same passes over a (T, B, H) array that does not fit in
cache. For the same reason the biases are added per step, as each step's rows are first read. The derivatives of sigmoid and tanh are taken from their outputs with ATen's fused
`sigmoid_backward` / `tanh_backward` (one pass each).

They compute the same functions as the cells' readable `step`s; tests hold them to it in float64,
values and every gradient, with and without dropout masks. Masks (T, B, H) multiply each step's
new h, so the dropped state is both the step's output and what the next step receives.

Shapes: T steps, B batch, H hidden units, G gates. Inputs and outputs are time-major.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

_sigmoid_backward = torch.ops.aten.sigmoid_backward.grad_input  # (grad, y, *, grad_input=out): grad * y * (1 - y)
_tanh_backward = torch.ops.aten.tanh_backward.grad_input  # (grad, y, *, grad_input=out): grad * (1 - y * y)


def _state_weight_gradient(grad_gates: Tensor, h0: Tensor, hs: Tensor) -> Tensor:
    """Sum over steps of grad_gates[t]^T h_prev[t], h_prev = h0, hs[0], ..., hs[T-2]: (G', H).
    Two products instead of one, so that h0 and hs need not be copied into one array."""
    T, B, H = hs.shape
    first = grad_gates[0].T @ h0  # (G', H)
    if T == 1:
        return first
    later = grad_gates[1:].reshape((T - 1) * B, -1)
    return torch.addmm(first, later.T, hs[:-1].reshape((T - 1) * B, H))


def _steps(tensor: Tensor | None, T: int) -> tuple[Tensor | None, ...]:
    """tensor (T, ...) as T views, made once (indexing inside the loop costs a dispatch per step)."""
    return (None,) * T if tensor is None else tensor.unbind(0)


def _grad_into_state(grad_step: Tensor, carried: Tensor | None, mask: Tensor | None) -> Tensor:
    """The gradient w.r.t. a step's new state before its mask: (output gradient + carried) * mask."""
    grad = grad_step if carried is None else grad_step + carried
    if mask is not None:
        grad = grad * mask
    return grad


class GRUScan(torch.autograd.Function):
    """The study's GRU (reset gate applied to h before W_h) over T steps.

    In:  products (T, B, 3H) = x W_ih^T for r, z, candidate; h0 (B, H); weight_hh (3H, H);
         bias_ih (3H); bias_rz (2H); masks (T, B, H) or None.
    Out: hs (T, B, H), the state after every step (the last one is the final state).
    """

    @staticmethod
    def forward(ctx, products, h0, weight_hh, bias_ih, bias_rz, masks):
        T, B, _ = products.shape
        H = h0.shape[1]
        gates = torch.empty_like(products)  # (T, B, 3H): sigmoid(r, z), tanh(candidate)
        bias_r_z, bias_n = bias_ih[: 2 * H] + bias_rz, bias_ih[2 * H :]
        rz_t, n_t = weight_hh[: 2 * H].T, weight_hh[2 * H :].T
        reset_h = gates.new_empty(T, B, H)  # r * h_prev, needed for the gradient of W_h
        hs = gates.new_empty(T, B, H)
        x_rz, x_n = products[..., : 2 * H].unbind(0), products[..., 2 * H :].unbind(0)
        rz_out, n_out = gates[..., : 2 * H].unbind(0), gates[..., 2 * H :].unbind(0)
        h = h0
        for t, (r_h, h_new, mask) in enumerate(zip(reset_h.unbind(0), hs.unbind(0), _steps(masks, T))):
            rz = torch.add(x_rz[t], bias_r_z, out=rz_out[t]).addmm_(h, rz_t).sigmoid_()  # (B, 2H)
            torch.mul(rz[:, :H], h, out=r_h)
            candidate = torch.add(x_n[t], bias_n, out=n_out[t]).addmm_(r_h, n_t).tanh_()  # (B, H)
            h = torch.lerp(h, candidate, rz[:, H:], out=h_new)  # (1 - z) h + z candidate
            if mask is not None:
                h.mul_(mask)
        ctx.save_for_backward(h0, weight_hh, gates, reset_h, hs, masks)
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs):
        h0, weight_hh, gates, reset_h, hs, masks = ctx.saved_tensors
        T, B, H = hs.shape
        weight_rz, weight_n = weight_hh[: 2 * H], weight_hh[2 * H :]
        grad_gates = torch.empty_like(gates)  # (T, B, 3H), w.r.t. the pre-activations
        r, z, candidate = _steps(gates[..., :H], T), _steps(gates[..., H : 2 * H], T), _steps(gates[..., 2 * H :], T)
        grad_r, grad_z = _steps(grad_gates[..., :H], T), _steps(grad_gates[..., H : 2 * H], T)
        grad_rz, grad_n = _steps(grad_gates[..., : 2 * H], T), _steps(grad_gates[..., 2 * H :], T)
        h_prev, grad_out, mask = (h0, *hs[:-1].unbind(0)), grad_hs.unbind(0), _steps(masks, T)
        grad_h = None
        for t in range(T - 1, -1, -1):
            grad = _grad_into_state(grad_out[t], grad_h, mask[t])  # (B, H)
            grad_through_z = grad * z[t]
            _tanh_backward(grad_through_z, candidate[t], grad_input=grad_n[t])
            grad_reset_h = grad_n[t] @ weight_n  # (B, H), w.r.t. r * h_prev
            _sigmoid_backward(grad_reset_h * h_prev[t], r[t], grad_input=grad_r[t])
            _sigmoid_backward(grad * (candidate[t] - h_prev[t]), z[t], grad_input=grad_z[t])
            grad_h = (grad - grad_through_z).addcmul_(grad_reset_h, r[t])  # the direct paths to h_prev
            grad_h.addmm_(grad_rz[t], weight_rz)  # through r and z
        grad_weight_hh = torch.cat(
            [
                _state_weight_gradient(grad_gates[..., : 2 * H], h0, hs),
                grad_gates[..., 2 * H :].reshape(T * B, H).T @ reset_h.view(T * B, H),
            ]
        )
        grad_bias_ih = grad_gates.sum((0, 1))
        # bias_rz's gradient is bias_ih's r and z part, copied so the two .grad tensors never share memory.
        return grad_gates, grad_h, grad_weight_hh, grad_bias_ih, grad_bias_ih[: 2 * H].clone(), None


class LSTMScan(torch.autograd.Function):
    """The LSTM (gates i, f, o, g; biases on the input side only) over T steps.

    In:  products (T, B, 4H) = x W_ih^T; h0, c0 (B, H); weight_hh (4H, H); bias_ih (4H); masks or None.
    Out: hs (T, B, H), the h after every step, and the final c (B, H).
    """

    @staticmethod
    def forward(ctx, products, h0, c0, weight_hh, bias_ih, masks):
        T, B, _ = products.shape
        H = h0.shape[1]
        gates = torch.empty_like(products)  # (T, B, 4H): sigmoid(i, f, o), tanh(g)
        hh_t = weight_hh.T
        cs = gates.new_empty(T, B, H)
        hs = gates.new_empty(T, B, H)
        h, c = h0, c0
        for x_t, a, c_new, h_new, mask in zip(products.unbind(0), gates.unbind(0), cs.unbind(0), hs.unbind(0), _steps(masks, T)):
            torch.add(x_t, bias_ih, out=a).addmm_(h, hh_t)  # (B, 4H)
            a[:, : 3 * H].sigmoid_()
            a[:, 3 * H :].tanh_()
            c = torch.mul(a[:, H : 2 * H], c, out=c_new).addcmul_(a[:, :H], a[:, 3 * H :])  # f c + i g
            h = torch.mul(a[:, 2 * H : 3 * H], torch.tanh(c), out=h_new)
            if mask is not None:
                h.mul_(mask)
        ctx.save_for_backward(h0, c0, weight_hh, gates, cs, hs, masks)
        return hs, cs[-1].clone()

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, grad_c_last):
        h0, c0, weight_hh, gates, cs, hs, masks = ctx.saved_tensors
        T, B, H = hs.shape
        grad_gates = torch.empty_like(gates)  # (T, B, 4H), w.r.t. the pre-activations
        i, f, o, g = (_steps(gates[..., k * H : (k + 1) * H], T) for k in range(4))
        grad_i, grad_f, grad_o, grad_g = (_steps(grad_gates[..., k * H : (k + 1) * H], T) for k in range(4))
        c_prev, grad_out, mask = (c0, *cs[:-1].unbind(0)), grad_hs.unbind(0), _steps(masks, T)
        grad_h = None
        grad_c = grad_c_last.clone()
        for t in range(T - 1, -1, -1):
            grad = _grad_into_state(grad_out[t], grad_h, mask[t])  # (B, H), w.r.t. h
            tanh_c = torch.tanh(cs[t])
            _sigmoid_backward(grad * tanh_c, o[t], grad_input=grad_o[t])
            grad_c += _tanh_backward(grad * o[t], tanh_c, grad_input=tanh_c)  # through h = o tanh(c)
            _sigmoid_backward(grad_c * g[t], i[t], grad_input=grad_i[t])
            _sigmoid_backward(grad_c * c_prev[t], f[t], grad_input=grad_f[t])
            _tanh_backward(grad_c * i[t], g[t], grad_input=grad_g[t])
            grad_c = grad_c * f[t]
            grad_h = grad_gates[t] @ weight_hh  # (B, H)
        grad_weight_hh = _state_weight_gradient(grad_gates, h0, hs)
        return grad_gates, grad_h, grad_c, grad_weight_hh, grad_gates.sum((0, 1)), None


class RNNScan(torch.autograd.Function):
    """The tanh RNN over T steps.

    In:  products (T, B, H) = x W_ih^T; h0 (B, H); weight_hh (H, H); bias_ih (H); masks or None.
    Out: hs (T, B, H), the state after every step.
    """

    @staticmethod
    def forward(ctx, products, h0, weight_hh, bias_ih, masks):
        T = products.shape[0]
        activations = torch.empty_like(products)  # (T, B, H): tanh(...)
        hs = activations if masks is None else torch.empty_like(activations)
        hh_t = weight_hh.T
        h = h0
        for x_t, a, h_new, mask in zip(products.unbind(0), activations.unbind(0), hs.unbind(0), _steps(masks, T)):
            h = torch.add(x_t, bias_ih, out=a).addmm_(h, hh_t).tanh_()
            if mask is not None:
                h = torch.mul(h, mask, out=h_new)
        ctx.save_for_backward(h0, weight_hh, activations, hs, masks)
        return hs

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs):
        h0, weight_hh, activations, hs, masks = ctx.saved_tensors
        T = hs.shape[0]
        grad_pre = torch.empty_like(activations)  # (T, B, H)
        a, grad_a, grad_out, mask = activations.unbind(0), grad_pre.unbind(0), grad_hs.unbind(0), _steps(masks, T)
        grad_h = None
        for t in range(T - 1, -1, -1):
            grad = _grad_into_state(grad_out[t], grad_h, mask[t])
            grad_h = _tanh_backward(grad, a[t], grad_input=grad_a[t]) @ weight_hh
        grad_weight_hh = _state_weight_gradient(grad_pre, h0, hs)
        return grad_pre, grad_h, grad_weight_hh, grad_pre.sum((0, 1)), None
