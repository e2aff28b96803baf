"""The tanh RNN's per-time-step loops for CUDA: 1 product and 1 fused kernel per time step each way.
See `triton_common` for the contract.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from rnnlm.models.cells.triton_common import BLOCK, _grad_h, _grid, _masks, _tanh, _unit, backward_start

# --- tanh RNN --------------------------------------------------------------------------------------


@triton.jit
def _rnn_forward(pre, bias, mask, h_new, n, H: tl.constexpr, HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """pre holds x W_ih^T + h W_hh^T: a = tanh(pre + b) written over it; h_new = a * mask."""
    u, b, j, ok = _unit(n, H, BLOCK)
    a = _tanh(tl.load(pre + u, mask=ok) + tl.load(bias + j, mask=ok))
    tl.store(pre + u, a, mask=ok)
    if HAS_MASK:
        a = a * tl.load(mask + u, mask=ok)
    tl.store(h_new + u, a, mask=ok)


@triton.jit
def _rnn_backward(activations, grad_out, from_later, mask, n, H: tl.constexpr, HAS_LATER: tl.constexpr,
                  HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """((grad_out + from_later) * mask) * (1 - a^2), the pre-activation gradient, written over a."""
    u, b, j, ok = _unit(n, H, BLOCK)
    grad = _grad_h(grad_out, from_later, mask, u, ok, HAS_LATER, HAS_MASK)
    a = tl.load(activations + u, mask=ok)
    tl.store(activations + u, grad * (1.0 - a * a), mask=ok)


def forward(products, h0, weight_hh, bias_ih, masks):
    """products (T, B, H), overwritten with the activations tanh(...); h0 (B, H), weight_hh (H, H),
    bias_ih (H), masks? -> hs (T, B, H), the activations times the masks."""
    T, B, H = products.shape
    n = B * H
    hh_t = weight_hh.T
    hs = torch.empty_like(products)
    h = h0.contiguous()
    for pre, h_new, mask in zip(products.unbind(0), hs.unbind(0), _masks(masks, T)):
        pre.addmm_(h, hh_t)
        _rnn_forward[_grid(n)](pre, bias_ih, mask if mask is not None else pre, h_new, n, H=H,
                               HAS_MASK=mask is not None, BLOCK=BLOCK)
        h = h_new
    return hs


def backward(grad_hs, weight_hh, activations, masks):
    """grad_hs (T, B, H) and what `forward` saved; activations is overwritten with the gradient
    w.r.t. the pre-activations -> grad_h0 (B, H)."""
    T, H, n, grad_out, mask = backward_start(grad_hs, masks)
    grad_h = activations.new_empty(grad_out[0].shape)  # (B, H)
    from_later = None
    for t in range(T - 1, -1, -1):
        _rnn_backward[_grid(n)](activations[t], grad_out[t], from_later if from_later is not None else grad_h,
                                mask[t] if mask[t] is not None else grad_h, n, H=H,
                                HAS_LATER=from_later is not None, HAS_MASK=mask[t] is not None, BLOCK=BLOCK)
        from_later = torch.mm(activations[t], weight_hh, out=grad_h)
    return from_later

