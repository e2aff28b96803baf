"""The LSTM's per-time-step loops for CUDA: 1 product and 1 fused kernel per time step each way.
See `triton_common` for the contract.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from rnnlm.models.cells.triton_common import BLOCK, _grad_h, _grid, _masks, _tanh, _unit, backward_start

# --- LSTM: gates i, f, o, g ------------------------------------------------------------------------


@triton.jit
def _lstm_forward(gates, bias, c_prev, mask, c_new, h_new, n, H: tl.constexpr, HAS_MASK: tl.constexpr,
                  BLOCK: tl.constexpr):
    """gates holds x W_ih^T + h W_hh^T: add the biases, activate (i, f, o sigmoid; g tanh), write them
    over it; c_new = f c + i g; h_new = o tanh(c_new) * mask."""
    u, b, j, ok = _unit(n, H, BLOCK)
    row = gates + b * (4 * H) + j
    i = tl.sigmoid(tl.load(row, mask=ok) + tl.load(bias + j, mask=ok))
    f = tl.sigmoid(tl.load(row + H, mask=ok) + tl.load(bias + H + j, mask=ok))
    o = tl.sigmoid(tl.load(row + 2 * H, mask=ok) + tl.load(bias + 2 * H + j, mask=ok))
    g = _tanh(tl.load(row + 3 * H, mask=ok) + tl.load(bias + 3 * H + j, mask=ok))
    tl.store(row, i, mask=ok)
    tl.store(row + H, f, mask=ok)
    tl.store(row + 2 * H, o, mask=ok)
    tl.store(row + 3 * H, g, mask=ok)
    c = f * tl.load(c_prev + u, mask=ok) + i * g
    tl.store(c_new + u, c, mask=ok)
    h = o * _tanh(c)
    if HAS_MASK:
        h = h * tl.load(mask + u, mask=ok)
    tl.store(h_new + u, h, mask=ok)


@triton.jit
def _lstm_backward(gates, grad_out, from_later, mask, c, c_prev, grad_c, n, H: tl.constexpr, HAS_LATER: tl.constexpr,
                   HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """From the gradient w.r.t. the new h ((grad_out + from_later) * mask) and grad_c (w.r.t. the new c):
    writes the four gates' pre-activation gradients over the gates and grad_c w.r.t. c_prev over grad_c."""
    u, b, j, ok = _unit(n, H, BLOCK)
    row = gates + b * (4 * H) + j
    grad = _grad_h(grad_out, from_later, mask, u, ok, HAS_LATER, HAS_MASK)
    i = tl.load(row, mask=ok)
    f = tl.load(row + H, mask=ok)
    o = tl.load(row + 2 * H, mask=ok)
    g = tl.load(row + 3 * H, mask=ok)
    tanh_c = _tanh(tl.load(c + u, mask=ok))
    gc = tl.load(grad_c + u, mask=ok) + grad * o * (1.0 - tanh_c * tanh_c)
    tl.store(row, gc * g * i * (1.0 - i), mask=ok)
    tl.store(row + H, gc * tl.load(c_prev + u, mask=ok) * f * (1.0 - f), mask=ok)
    tl.store(row + 2 * H, grad * tanh_c * o * (1.0 - o), mask=ok)
    tl.store(row + 3 * H, gc * i * (1.0 - g * g), mask=ok)
    tl.store(grad_c + u, gc * f, mask=ok)


def forward(products, h0, c0, weight_hh, bias_ih, masks):
    """products (T, B, 4H), overwritten with the activated gates (i, f, o sigmoid; g tanh); h0, c0 (B, H),
    weight_hh (4H, H), bias_ih (4H), masks? -> hs (T, B, H), cs (T, B, H)."""
    T, B, _ = products.shape
    H = h0.shape[1]
    n = B * H
    hh_t = weight_hh.T
    hs, cs = products.new_empty(T, B, H), products.new_empty(T, B, H)
    h, c = h0.contiguous(), c0.contiguous()
    for gates, c_new, h_new, mask in zip(products.unbind(0), cs.unbind(0), hs.unbind(0), _masks(masks, T)):
        gates.addmm_(h, hh_t)
        _lstm_forward[_grid(n)](gates, bias_ih, c, mask if mask is not None else c, c_new, h_new, n, H=H,
                                HAS_MASK=mask is not None, BLOCK=BLOCK)
        h, c = h_new, c_new
    return hs, cs


def backward(grad_hs, grad_c_last, c0, weight_hh, gates, cs, masks):
    """grad_hs (T, B, H), grad_c_last (B, H) and what `forward` saved; gates is overwritten with
    their gradients w.r.t. the pre-activations -> grad_h0, grad_c0 (B, H)."""
    T, H, n, grad_out, mask = backward_start(grad_hs, masks)
    c_prev = (c0.contiguous(), *cs[:-1].unbind(0))
    grad_c = grad_c_last.clone(memory_format=torch.contiguous_format)
    from_later = None
    grad_h = torch.empty_like(grad_c)
    for t in range(T - 1, -1, -1):
        _lstm_backward[_grid(n)](gates[t], grad_out[t], from_later if from_later is not None else grad_c,
                                 mask[t] if mask[t] is not None else grad_c, cs[t], c_prev[t], grad_c, n, H=H,
                                 HAS_LATER=from_later is not None, HAS_MASK=mask[t] is not None, BLOCK=BLOCK)
        from_later = torch.mm(gates[t], weight_hh, out=grad_h)  # (B, H)
    return from_later, grad_c

