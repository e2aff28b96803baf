"""The per-step loops of `rnnlm.scans` and the one-token steps of `rnnlm.stepping`, in Python over
ATen calls: the ones that run on CUDA.

On the CPU the same nine functions come compiled from `csrc/scan_loops.cpp` (see `rnnlm.native`),
which fuses each step's elementwise work into one pass; tests hold both to the cells' readable steps.

- forward: given the input-side products of all T steps, run per step only the hidden-side
  products, added in place to the step's rows and activated in place: the products become the
  activated gates, kept for the backward pass.
- backward: run the recurrence backwards computing only the gate gradients and the state gradient
  of each step, writing the gate gradients over the gates, step by step (each step's gates are read
  before they are overwritten): the array becomes the gradient of the input products. Weight and
  bias gradients are formed afterwards, over all steps at once.

The biases are added per step, as each step's rows are first read: a few passes over a (B, H) slice
that stays in cache cost far less than the same passes over a (T, B, H) array. The derivatives of
sigmoid and tanh are taken from their outputs with ATen's fused `sigmoid_backward` / `tanh_backward`.
Masks (T, B, H) multiply each step's new h, so the dropped state is both the step's output and
what the next step receives.

Shapes: T steps, B batch, H hidden units, G gates; time-major. GRU gates r, z, n; LSTM i, f, o, g.
"""

from __future__ import annotations

import torch
from torch import Tensor

_sigmoid_backward = torch.ops.aten.sigmoid_backward.grad_input  # (grad, y, *, grad_input=out): grad * y * (1 - y)
_tanh_backward = torch.ops.aten.tanh_backward.grad_input  # (grad, y, *, grad_input=out): grad * (1 - y * y)


def _steps(tensor: Tensor | None, T: int) -> tuple[Tensor | None, ...]:
    """tensor (T, ...) as T views, made once (indexing inside the loop costs a dispatch per step)."""
    return (None,) * T if tensor is None else tensor.unbind(0)


def _grad_into_state(grad_step: Tensor, carried: Tensor | None, mask: Tensor | None) -> Tensor:
    """The gradient w.r.t. a step's new state before its mask: (output gradient + carried) * mask."""
    grad = grad_step if carried is None else grad_step + carried
    if mask is not None:
        grad = grad * mask
    return grad


def gru_forward(products, h0, weight_hh, bias_ih, bias_rz, masks):
    """products (T, B, 3H), overwritten with the activated gates (r, z, candidate); h0 (B, H),
    weight_hh (3H, H), bias_ih (3H), bias_rz (2H), masks? -> hs (T, B, H), reset_h (T, B, H) = r * h_prev."""
    T, B, _ = products.shape
    H = h0.shape[1]
    gates = products
    bias_r_z, bias_n = bias_ih[: 2 * H] + bias_rz, bias_ih[2 * H :]
    rz_t, n_t = weight_hh[: 2 * H].T, weight_hh[2 * H :].T
    reset_h = gates.new_empty(T, B, H)
    hs = gates.new_empty(T, B, H)
    rz_pre, n_pre = gates[..., : 2 * H].unbind(0), gates[..., 2 * H :].unbind(0)
    h = h0
    for t, (r_h, h_new, mask) in enumerate(zip(reset_h.unbind(0), hs.unbind(0), _steps(masks, T))):
        rz = rz_pre[t].add_(bias_r_z).addmm_(h, rz_t).sigmoid_()  # (B, 2H)
        torch.mul(rz[:, :H], h, out=r_h)
        candidate = n_pre[t].add_(bias_n).addmm_(r_h, n_t).tanh_()  # (B, H)
        h = torch.lerp(h, candidate, rz[:, H:], out=h_new)  # (1 - z) h + z candidate
        if mask is not None:
            h.mul_(mask)
    return hs, reset_h


def gru_backward(grad_hs, h0, weight_hh, gates, hs, masks):
    """grad_hs (T, B, H) and what gru_forward saved; gates is overwritten with their gradients
    w.r.t. the pre-activations -> grad_h0 (B, H)."""
    T, B, H = hs.shape
    weight_rz, weight_n = weight_hh[: 2 * H], weight_hh[2 * H :]
    grad_gates = gates
    r, z, candidate = _steps(gates[..., :H], T), _steps(gates[..., H : 2 * H], T), _steps(gates[..., 2 * H :], T)
    grad_r, grad_z = _steps(grad_gates[..., :H], T), _steps(grad_gates[..., H : 2 * H], T)
    grad_rz, grad_n = _steps(grad_gates[..., : 2 * H], T), _steps(grad_gates[..., 2 * H :], T)
    h_prev, grad_out, mask = (h0, *hs[:-1].unbind(0)), grad_hs.unbind(0), _steps(masks, T)
    grad_h = None
    for t in range(T - 1, -1, -1):
        grad = _grad_into_state(grad_out[t], grad_h, mask[t])  # (B, H)
        grad_through_z = grad * z[t]
        _sigmoid_backward(grad * (candidate[t] - h_prev[t]), z[t], grad_input=grad_z[t])
        _tanh_backward(grad_through_z, candidate[t], grad_input=grad_n[t])
        grad_reset_h = grad_n[t] @ weight_n  # (B, H), w.r.t. r * h_prev
        grad_h = (grad - grad_through_z).addcmul_(grad_reset_h, r[t])  # the direct paths to h_prev
        _sigmoid_backward(grad_reset_h * h_prev[t], r[t], grad_input=grad_r[t])
        grad_h.addmm_(grad_rz[t], weight_rz)  # through r and z
    return grad_h


def lstm_forward(products, h0, c0, weight_hh, bias_ih, masks):
    """products (T, B, 4H), overwritten with the activated gates (i, f, o sigmoid; g tanh); h0, c0 (B, H),
    weight_hh (4H, H), bias_ih (4H), masks? -> hs (T, B, H), cs (T, B, H)."""
    T, B, _ = products.shape
    H = h0.shape[1]
    gates = products
    hh_t = weight_hh.T
    cs = gates.new_empty(T, B, H)
    hs = gates.new_empty(T, B, H)
    h, c = h0, c0
    for a, c_new, h_new, mask in zip(gates.unbind(0), cs.unbind(0), hs.unbind(0), _steps(masks, T)):
        a.add_(bias_ih).addmm_(h, hh_t)  # (B, 4H)
        a[:, : 3 * H].sigmoid_()
        a[:, 3 * H :].tanh_()
        c = torch.mul(a[:, H : 2 * H], c, out=c_new).addcmul_(a[:, :H], a[:, 3 * H :])  # f c + i g
        h = torch.mul(a[:, 2 * H : 3 * H], torch.tanh(c), out=h_new)
        if mask is not None:
            h.mul_(mask)
    return hs, cs


def lstm_backward(grad_hs, grad_c_last, c0, weight_hh, gates, cs, masks):
    """grad_hs (T, B, H), grad_c_last (B, H) and what lstm_forward saved; gates is overwritten with
    their gradients w.r.t. the pre-activations -> grad_h0, grad_c0 (B, H)."""
    T, B, H = cs.shape
    grad_gates = gates
    i, f, o, g = (_steps(gates[..., k * H : (k + 1) * H], T) for k in range(4))
    grad_i, grad_f, grad_o, grad_g = (_steps(grad_gates[..., k * H : (k + 1) * H], T) for k in range(4))
    c_prev, grad_out, mask = (c0, *cs[:-1].unbind(0)), grad_hs.unbind(0), _steps(masks, T)
    grad_h = None
    grad_c = grad_c_last.clone()
    for t in range(T - 1, -1, -1):
        grad = _grad_into_state(grad_out[t], grad_h, mask[t])  # (B, H), w.r.t. h
        tanh_c = torch.tanh(cs[t])
        grad_through_o = grad * o[t]
        _sigmoid_backward(grad * tanh_c, o[t], grad_input=grad_o[t])
        grad_c += _tanh_backward(grad_through_o, tanh_c, grad_input=tanh_c)  # through h = o tanh(c)
        grad_c_i, grad_c_g = grad_c * i[t], grad_c * g[t]
        _sigmoid_backward(grad_c_g, i[t], grad_input=grad_i[t])
        _tanh_backward(grad_c_i, g[t], grad_input=grad_g[t])
        grad_c_f = grad_c * f[t]
        _sigmoid_backward(grad_c * c_prev[t], f[t], grad_input=grad_f[t])
        grad_c = grad_c_f
        grad_h = grad_gates[t] @ weight_hh  # (B, H)
    return grad_h, grad_c


def rnn_forward(products, h0, weight_hh, bias_ih, masks):
    """products (T, B, H), overwritten with the activations tanh(...); h0 (B, H), weight_hh (H, H),
    bias_ih (H), masks? -> hs (T, B, H), the activations times the masks."""
    T = products.shape[0]
    activations = products
    hs = torch.empty_like(activations)
    hh_t = weight_hh.T
    h = h0
    for a, h_new, mask in zip(activations.unbind(0), hs.unbind(0), _steps(masks, T)):
        a.add_(bias_ih).addmm_(h, hh_t).tanh_()
        h = torch.mul(a, mask, out=h_new) if mask is not None else h_new.copy_(a)
    return hs


def rnn_backward(grad_hs, weight_hh, activations, masks):
    """grad_hs (T, B, H) and what rnn_forward saved; activations is overwritten with the gradient
    w.r.t. the pre-activations -> grad_h0 (B, H)."""
    T = activations.shape[0]
    grad_pre = activations
    a, grad_a, grad_out, mask = activations.unbind(0), grad_pre.unbind(0), grad_hs.unbind(0), _steps(masks, T)
    grad_h = None
    for t in range(T - 1, -1, -1):
        grad = _grad_into_state(grad_out[t], grad_h, mask[t])
        grad_h = _tanh_backward(grad, a[t], grad_input=grad_a[t]) @ weight_hh
    return grad_h


# One token, for sampling (`rnnlm.stepping`): no autograd, nothing kept. gates_x (B, G*H) holds the
# input-side products with every bias added; the hidden-side matrices come transposed, (H, G*H).


def gru_step(gates_x, h, rz_t, n_t):
    """gates_x (B, 3H), h (B, H), rz_t (H, 2H), n_t (H, H) -> the new h (B, H)."""
    H = h.shape[1]
    rz = torch.addmm(gates_x[:, : 2 * H], h, rz_t).sigmoid_()  # (B, 2H)
    candidate = torch.addmm(gates_x[:, 2 * H :], rz[:, :H] * h, n_t).tanh_()  # (B, H)
    return torch.lerp(h, candidate, rz[:, H:])


def lstm_step(gates_x, h, c, hh_t):
    """gates_x (B, 4H), h, c (B, H), hh_t (H, 4H) -> the new h and c (B, H)."""
    H = h.shape[1]
    gates = torch.addmm(gates_x, h, hh_t)  # (B, 4H): i, f, o, g
    gates[:, : 3 * H].sigmoid_()
    gates[:, 3 * H :].tanh_()
    c = torch.addcmul(gates[:, H : 2 * H] * c, gates[:, :H], gates[:, 3 * H :])
    return gates[:, 2 * H : 3 * H] * torch.tanh(c), c


def rnn_step(gates_x, h, hh_t):
    """gates_x (B, H), h (B, H), hh_t (H, H) -> the new h (B, H)."""
    return torch.addmm(gates_x, h, hh_t).tanh_()
