"""The models' matrix products outside the compiled loops, through the float32 GEMMs that
`rnnlm.compute.backend.gemm_for` chooses.

The products over all T*B rows of a sequence (each layer's input products, the output layer, and in
the backward pass their gradients and the hidden-side weight gradients) are most of a training
step's work; they follow the switch's `large` library. The Python advancer's products (B rows, one
token) follow its `narrow` library (`one_row` for one row), as the compiled sampling advance does, so
the two give the same logits bit for bit. Where the library is "onednn" and the tensors are float32 on the CPU, the
functions here call oneDNN's linear op (`torch.ops.mkldnn._linear_pointwise`: exact float32, no
reduced-precision math); everywhere else (MKL chosen, float64, CUDA) they are plain ATen
expressions (`torch.mm` is MKL's GEMM on the CPU).

In:  `linear(x (..., K), weight (N, K), bias (N) or None, narrow=False)` -> x W^T + b (..., N), with
     autograd (`narrow=True`: a product of one time step, the advancer's);
     `t_mm(a (M, N), b (M, K))` -> a^T b (N, K) and `t_addmm(c, a, b)` -> c + a^T b, for the
     hand-written backward passes (no autograd).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from rnnlm.compute import backend

_onednn_linear = torch.ops.mkldnn._linear_pointwise


def _dense(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x (M, K) W^T (+ b) through oneDNN. Each operand must be dense, row- or column-major (W may be
    a transposed view): a wider row stride makes oneDNN fall back to a reference kernel, many times
    slower, so any other layout is copied first."""
    return _onednn_linear(_dense_layout(x), _dense_layout(weight), bias, "none", [], "")


def _dense_layout(t: Tensor) -> Tensor:
    return t if t.is_contiguous() or t.t().is_contiguous() else t.contiguous()


class _OnednnLinear(torch.autograd.Function):
    """x (M, K) W^T + b through oneDNN, and its gradients through oneDNN too."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _dense(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad = grad.contiguous()
        grad_x = _dense(grad, weight.t()) if ctx.needs_input_grad[0] else None  # (M, K) = grad W
        grad_weight = t_mm(grad, x) if ctx.needs_input_grad[1] else None  # (N, K) = grad^T x
        grad_bias = grad.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, narrow: bool = False) -> Tensor:
    """x (..., K) -> x W^T (+ b) (..., N), differentiable in all three; `narrow`: a product of one
    time step (the advancer's), which follows the narrow products' library."""
    rows = x.numel() // x.shape[-1]
    if not backend.onednn_for(x, rows * weight.shape[0] * weight.shape[1], rows if narrow else None):
        return torch.matmul(x, weight.T) if bias is None else F.linear(x, weight, bias)
    # A one-token product adds its bias after oneDNN's product, the faster at batch 1
    # (reports/speed/cpu-amd-epyc-avx2-family25.md); the compiled advance (kernels.cpp, narrow_linear)
    # does the same, so the two agree bit for bit. The large products keep it fused.
    out = _OnednnLinear.apply(x.reshape(rows, x.shape[-1]), weight, None if narrow else bias)
    if narrow and bias is not None:
        out = out.add_(bias)
    return out.view(*x.shape[:-1], weight.shape[0])


def t_mm(a: Tensor, b: Tensor) -> Tensor:
    """a (M, N), b (M, K) -> a^T b (N, K): a weight gradient summed over M rows."""
    return t_addmm(None, a, b)


def t_addmm(c: Tensor | None, a: Tensor, b: Tensor) -> Tensor:
    """c (N, K) + a^T b, a (M, N), b (M, K), or a^T b alone when c is None; c may be overwritten
    with the result."""
    if not backend.onednn_for(a, a.shape[0] * a.shape[1] * b.shape[1]):
        return a.T @ b if c is None else torch.addmm(c, a.T, b)
    compiled = backend.compiled_for(a.device)
    if compiled is not None and backend.onednn_matmul_available():  # oneDNN's matmul reads a^T in place
        return compiled.onednn_t_addmm(None if c is None else c.contiguous(), a, b)
    # Through the linear op, which copies a transposed input: (K, N) = b^T a, then transposed.
    product = _dense(b.contiguous().t(), a.contiguous().t()).t().contiguous()
    return product if c is None else product.add_(c)
