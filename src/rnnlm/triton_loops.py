"""The per-step loops of `rnnlm.scans` for CUDA: products in cuBLAS, each step's elementwise work
fused into one or two Triton kernels.

Same functions, signatures and in-place contract as `rnnlm.scan_loops` (read its docstring): the
products become the activated gates in the forward pass, the gates become their gradients in the
backward pass. What changes is the number of kernels a step launches. The ATen loops launch one
kernel per operation, about 20 per layer and time step for the GRU, each of which costs a launch
and a trip through memory; here a GRU step is 2 products and 2 fused kernels forward and the same
backward, an LSTM or tanh-RNN step 1 product and 1 kernel each way. Profiled on an H100
(benchmarks/gpu_check.py --profile), the elementwise kernels were half of a step's GPU time.

The study's reset gate (applied to h before W_h) is why the GRU needs two kernels each way: the
candidate's product needs r * h, so the gates r, z are finished before it and the candidate after.

Each kernel covers the B*H units of one step in blocks; a unit's gate g of row b sits at column
g*H + j of that row. tanh is computed from exp (1 - 2 / (exp(2x) + 1)), the form Triton's CPU
interpreter also runs, so the tests run these kernels on a machine without a GPU
(TRITON_INTERPRET=1), in float64 and float32, against the readable cells.

Shapes: T steps, B batch, H hidden units; time-major; every (B, H) buffer contiguous.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from rnnlm.scan_loops import gru_step, lstm_step, rnn_step  # noqa: F401 - sampling steps are shared

BLOCK = 512  # units per program


@triton.jit
def _tanh(x):
    """tanh(x) = 1 - 2 / (exp(2x) + 1): exact at +-inf, no overflow to NaN."""
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


@triton.jit
def _unit(n, H: tl.constexpr, BLOCK: tl.constexpr):
    """This program's unit numbers u = b*H + j, their row b and column j, and which are in range."""
    u = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    return u, u // H, u % H, u < n


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
def _gru_backward_zn(gates, grad_out, carried, mask, h_prev, direct, n, H: tl.constexpr, HAS_CARRY: tl.constexpr,
                     HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """grad = (grad_out + carried) * mask, w.r.t. the step's new h; writes the gradients w.r.t. the
    pre-activations of z and the candidate over z and the candidate; direct = grad * (1 - z)."""
    u, b, j, ok = _unit(n, H, BLOCK)
    row = gates + b * (3 * H) + j
    grad = tl.load(grad_out + u, mask=ok)
    if HAS_CARRY:
        grad = grad + tl.load(carried + u, mask=ok)
    if HAS_MASK:
        grad = grad * tl.load(mask + u, mask=ok)
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


def _grid(n: int) -> tuple[int]:
    return (triton.cdiv(n, BLOCK),)


def _masks(masks: Tensor | None, T: int) -> tuple[Tensor | None, ...]:
    return (None,) * T if masks is None else masks.contiguous().unbind(0)


def gru_forward(products, h0, weight_hh, bias_ih, bias_rz, masks):
    """products (T, B, 3H), overwritten with the activated gates (r, z, candidate); h0 (B, H),
    weight_hh (3H, H), bias_ih (3H), bias_rz (2H), masks? -> hs (T, B, H), reset_h (T, B, H) = r * h_prev."""
    T, B, _ = products.shape
    H = h0.shape[1]
    n = B * H
    bias_r_z, bias_n = bias_ih[: 2 * H] + bias_rz, bias_ih[2 * H :].contiguous()
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


def gru_backward(grad_hs, h0, weight_hh, gates, hs, masks):
    """grad_hs (T, B, H) and what gru_forward saved; gates is overwritten with their gradients
    w.r.t. the pre-activations -> grad_h0 (B, H)."""
    T, B, H = hs.shape
    n = B * H
    weight_rz, weight_n = weight_hh[: 2 * H], weight_hh[2 * H :]
    grad_hs = grad_hs.contiguous()
    h_prev = (h0.contiguous(), *hs[:-1].unbind(0))
    grad_out, mask = grad_hs.unbind(0), _masks(masks, T)
    buffers = [torch.empty_like(h0), torch.empty_like(h0)]  # the carried gradient and the next, in turn
    grad_reset_h = torch.empty_like(h0)
    carried = None
    for t in range(T - 1, -1, -1):
        step_gates = gates[t]
        direct = buffers[t % 2]
        _gru_backward_zn[_grid(n)](step_gates, grad_out[t], carried if carried is not None else direct,
                                   mask[t] if mask[t] is not None else direct, h_prev[t], direct, n, H=H,
                                   HAS_CARRY=carried is not None, HAS_MASK=mask[t] is not None, BLOCK=BLOCK)
        torch.mm(step_gates[:, 2 * H :], weight_n, out=grad_reset_h)  # (B, H), w.r.t. r * h_prev
        _gru_backward_r[_grid(n)](step_gates, grad_reset_h, h_prev[t], direct, n, H=H, BLOCK=BLOCK)
        carried = direct.addmm_(step_gates[:, : 2 * H], weight_rz)  # through r and z
    return carried


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
def _lstm_backward(gates, grad_out, carried, mask, c, c_prev, grad_c, n, H: tl.constexpr, HAS_CARRY: tl.constexpr,
                   HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """From the gradient w.r.t. the new h ((grad_out + carried) * mask) and grad_c (w.r.t. the new c):
    writes the four gates' pre-activation gradients over the gates and grad_c w.r.t. c_prev over grad_c."""
    u, b, j, ok = _unit(n, H, BLOCK)
    row = gates + b * (4 * H) + j
    grad = tl.load(grad_out + u, mask=ok)
    if HAS_CARRY:
        grad = grad + tl.load(carried + u, mask=ok)
    if HAS_MASK:
        grad = grad * tl.load(mask + u, mask=ok)
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


def lstm_forward(products, h0, c0, weight_hh, bias_ih, masks):
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


def lstm_backward(grad_hs, grad_c_last, c0, weight_hh, gates, cs, masks):
    """grad_hs (T, B, H), grad_c_last (B, H) and what lstm_forward saved; gates is overwritten with
    their gradients w.r.t. the pre-activations -> grad_h0, grad_c0 (B, H)."""
    T, B, H = cs.shape
    n = B * H
    grad_hs = grad_hs.contiguous()
    c_prev, grad_out, mask = (c0.contiguous(), *cs[:-1].unbind(0)), grad_hs.unbind(0), _masks(masks, T)
    grad_c = grad_c_last.clone(memory_format=torch.contiguous_format)
    carried = None
    grad_h = torch.empty_like(grad_c)
    for t in range(T - 1, -1, -1):
        _lstm_backward[_grid(n)](gates[t], grad_out[t], carried if carried is not None else grad_c,
                                 mask[t] if mask[t] is not None else grad_c, cs[t], c_prev[t], grad_c, n, H=H,
                                 HAS_CARRY=carried is not None, HAS_MASK=mask[t] is not None, BLOCK=BLOCK)
        carried = torch.mm(gates[t], weight_hh, out=grad_h)  # (B, H)
    return carried, grad_c


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
def _rnn_backward(activations, grad_out, carried, mask, n, H: tl.constexpr, HAS_CARRY: tl.constexpr,
                  HAS_MASK: tl.constexpr, BLOCK: tl.constexpr):
    """((grad_out + carried) * mask) * (1 - a^2), the pre-activation gradient, written over a."""
    u, b, j, ok = _unit(n, H, BLOCK)
    grad = tl.load(grad_out + u, mask=ok)
    if HAS_CARRY:
        grad = grad + tl.load(carried + u, mask=ok)
    if HAS_MASK:
        grad = grad * tl.load(mask + u, mask=ok)
    a = tl.load(activations + u, mask=ok)
    tl.store(activations + u, grad * (1.0 - a * a), mask=ok)


def rnn_forward(products, h0, weight_hh, bias_ih, masks):
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


def rnn_backward(grad_hs, weight_hh, activations, masks):
    """grad_hs (T, B, H) and what rnn_forward saved; activations is overwritten with the gradient
    w.r.t. the pre-activations -> grad_h0 (B, H)."""
    T, B, H = activations.shape
    n = B * H
    grad_hs = grad_hs.contiguous()
    grad_out, mask = grad_hs.unbind(0), _masks(masks, T)
    grad_h = activations.new_empty(B, H)
    carried = None
    for t in range(T - 1, -1, -1):
        _rnn_backward[_grid(n)](activations[t], grad_out[t], carried if carried is not None else grad_h,
                                mask[t] if mask[t] is not None else grad_h, n, H=H,
                                HAS_CARRY=carried is not None, HAS_MASK=mask[t] is not None, BLOCK=BLOCK)
        carried = torch.mm(activations[t], weight_hh, out=grad_h)
    return carried
