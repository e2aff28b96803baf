"""LayerNorm whose gradients do not depend on the number of CPU threads.

PyTorch's CPU LayerNorm backward sums the weight's and the bias's gradients over the rows in one
partial sum per thread, then adds the partials: the same run gives other last bits at another thread
count. It is the only operation of our training step that does (every cell, the products, the loss,
the clipping norm and AdamW give the same bits at one thread and at two; checked by
tests/test_layer_norm.py), and it is what stops a run from changing its thread count as other runs
come and go without changing its checkpoint (`compute/threads.py`).

`layer_norm` computes the forward pass with PyTorch's own kernel (the same bits as `F.layer_norm`)
and, on the CPU, the backward pass with PyTorch's kernel for the input's gradient (one row at a time,
whatever the threads) and column sums for the weight's and bias's gradients (a sum over the leading
dimension splits over the columns, never inside one). On other devices it is `F.layer_norm`.

In:  x (..., H), weight (H,), bias (H,), eps.   Out: y (..., H).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
        y, mean, rstd = torch.native_layer_norm(x, weight.shape, weight, bias, eps)  # mean, rstd (..., 1)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        dx, _, _ = torch.ops.aten.native_layer_norm_backward(grad, x, weight.shape, mean, rstd, weight, bias,
                                                             [True, False, False])
        width = x.shape[-1]
        rows, grads = x.reshape(-1, width), grad.reshape(-1, width)  # (N, H)
        normalized = (rows - mean.reshape(-1, 1)) * rstd.reshape(-1, 1)  # (N, H)
        return dx, (grads * normalized).sum(0), grads.sum(0), None


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm over the last dimension of x (..., H) with weight and bias (H,); see the module."""
    if x.device.type != "cpu" or not torch.is_grad_enabled():
        return F.layer_norm(x, weight.shape, weight, bias, eps)
    return _LayerNorm.apply(x, weight, bias, eps)
