"""The GRU's per-time-step loops for CUDA: 2 products and 2 fused kernels per time step each way (the
study's reset gate needs r before the candidate's product). See `triton_common` for the contract.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from rnnlm.models.cells.triton_common import BLOCK, _grad_h, _grid, _masks, _tanh, _unit, backward_start

# --- GRU: gates r, z, candidate -------------------------------------------------------------------


@triton.jit
def _gru_forward_rz(gates, bias_rz, h, reset_h, n, H: tl.constexpr, BLOCK: tl.constexpr):
    """gates[:, :2H] holds x W_{r,z}^T + h W_{r,z}^T: add the biases, activate, write r, z over them;
    reset_h = r * h."""
    u, b, j, ok = _unit(n, H, BLOCK)
    row = gates + b * (3 * H) + j
    r = tl.sigmoid(tl.load(row, mask=ok) + tl.load(bias_rz + j, mask=ok))
    z = tl.sigmoid(tl.load(row + H, mask=ok) + tl.load(bias_rz + H + j, mask=ok))
    tl.store(row, r, mask=ok)
    tl.store(row + H, z, mask=ok)
    tl.store(reset_h + u, r * tl.load(h + u, mask=ok), mask=ok)


@triton.jit
def _gru_forward_new_h(gates, bias_n, h, mask, h_new, n, H: tl.constexpr, HAS_MASK: tl.constexpr,
                       BLOCK: tl.constexpr):
    """gates[:, 2H:] holds x W_x^T + (r h) W_h^T: candidate = tanh(that + b_x), written over it;
    h_new = ((1 - z) h + z candidate) * mask."""
    u, b, j, ok = _unit(n, H, BLOCK)
    row = gates + b * (3 * H) + j
    candidate = _tanh(tl.load(row + 2 * H, mask=ok) + tl.load(bias_n + j, mask=ok))
    tl.store(row + 2 * H, candidate, mask=ok)
    z = tl.load(row + H, mask=ok)
    h_prev = tl.load(h + u, mask=ok)
    new = h_prev + z * (candidate - h_prev)
    if HAS_MASK:
        new = new * tl.load(mask + u, mask=ok)
    tl.store(h_new + u, new, mask=ok)


@triton.jit
def _gru_backward_zn(gates, grad_out, from_later, mask, h_prev, direct, n, H: tl.constexpr, HAS_LATER: tl.constexpr,
                     HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """grad = (grad_out + from_later) * mask, w.r.t. the time step's new h; writes the gradients w.r.t. the
    pre-activations of z and the candidate over z and the candidate; direct = grad * (1 - z)."""
    u, b, j, ok = _unit(n, H, BLOCK)
    row = gates + b * (3 * H) + j
    grad = _grad_h(grad_out, from_later, mask, u, ok, HAS_LATER, HAS_MASK)
    z = tl.load(row + H, mask=ok)
    candidate = tl.load(row + 2 * H, mask=ok)
    hp = tl.load(h_prev + u, mask=ok)
    tl.store(row + H, grad * (candidate - hp) * z * (1.0 - z), mask=ok)
    tl.store(row + 2 * H, grad * z * (1.0 - candidate * candidate), mask=ok)
    tl.store(direct + u, grad - grad * z, mask=ok)


@triton.jit
def _gru_backward_r(gates, grad_reset_h, h_prev, direct, n, H: tl.constexpr, BLOCK: tl.constexpr):
    """grad_reset_h = grad_n W_h (w.r.t. r * h_prev): writes r's pre-activation gradient over r and
    adds the path through r * h_prev to direct."""
    u, b, j, ok = _unit(n, H, BLOCK)
    row = gates + b * (3 * H) + j
    r = tl.load(row, mask=ok)
    g = tl.load(grad_reset_h + u, mask=ok)
    tl.store(row, g * tl.load(h_prev + u, mask=ok) * r * (1.0 - r), mask=ok)
    tl.store(direct + u, tl.load(direct + u, mask=ok) + g * r, mask=ok)


def forward(products, h0, weight_hh, bias, masks):
    """products (T, B, 3H), overwritten with the activated gates (r, z, candidate); h0 (B, H),
    weight_hh (3H, H), bias (3H) folded (`gru.fold_bias`), masks? -> hs (T, B, H), reset_h (T, B, H) = r * h_prev."""
    T, B, _ = products.shape
    H = h0.shape[1]
    n = B * H
    bias_r_z, bias_n = bias[: 2 * H], bias[2 * H :].contiguous()
    rz_t, n_t = weight_hh[: 2 * H].T, weight_hh[2 * H :].T
    hs, reset_h = products.new_empty(T, B, H), products.new_empty(T, B, H)
    h = h0.contiguous()
    for t, (gates, r_h, h_new, mask) in enumerate(zip(products.unbind(0), reset_h.unbind(0), hs.unbind(0),
                                                      _masks(masks, T))):
        gates[:, : 2 * H].addmm_(h, rz_t)
        _gru_forward_rz[_grid(n)](gates, bias_r_z, h, r_h, n, H=H, BLOCK=BLOCK)
        gates[:, 2 * H :].addmm_(r_h, n_t)
        _gru_forward_new_h[_grid(n)](gates, bias_n, h, mask if mask is not None else h, h_new, n, H=H,
                                     HAS_MASK=mask is not None, BLOCK=BLOCK)
        h = h_new
    return hs, reset_h


def backward(grad_hs, h0, weight_hh, gates, hs, masks):
    """grad_hs (T, B, H) and what `forward` saved; gates is overwritten with their gradients
    w.r.t. the pre-activations -> grad_h0 (B, H)."""
    T, H, n, grad_out, mask = backward_start(grad_hs, masks)
    weight_rz, weight_n = weight_hh[: 2 * H], weight_hh[2 * H :]
    h_prev = (h0.contiguous(), *hs[:-1].unbind(0))
    buffers = [torch.empty_like(h0), torch.empty_like(h0)]  # the gradient from the later time step and the next, in turn
    grad_reset_h = torch.empty_like(h0)
    from_later = None
    for t in range(T - 1, -1, -1):
        gates_t = gates[t]
        direct = buffers[t % 2]
        _gru_backward_zn[_grid(n)](gates_t, grad_out[t], from_later if from_later is not None else direct,
                                   mask[t] if mask[t] is not None else direct, h_prev[t], direct, n, H=H,
                                   HAS_LATER=from_later is not None, HAS_MASK=mask[t] is not None, BLOCK=BLOCK)
        torch.mm(gates_t[:, 2 * H :], weight_n, out=grad_reset_h)  # (B, H), w.r.t. r * h_prev
        _gru_backward_r[_grid(n)](gates_t, grad_reset_h, h_prev[t], direct, n, H=H, BLOCK=BLOCK)
        from_later = direct.addmm_(gates_t[:, : 2 * H], weight_rz)  # through r and z
    return from_later

