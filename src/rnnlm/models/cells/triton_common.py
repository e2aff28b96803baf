"""What the cells' Triton loops share (`gru_triton.py`, `lstm_triton.py`, `rnn_triton.py`): CUDA's
per-time-step loops, products in cuBLAS, each time step's elementwise work fused into one or two
Triton kernels.

Same functions, signatures and in-place contract as each cell's Python loops (see `base`): the
products become the activated gates in the forward pass, the gates become their gradients in the
backward pass. What changes is the number of kernels a time step launches. The ATen loops launch one
kernel per operation, about 20 per layer and time step for the GRU, each of which costs a launch
and a trip through memory; here a GRU time step is 2 products and 2 fused kernels forward and the same
backward, an LSTM or tanh-RNN time step 1 product and 1 kernel each way (`benchmarks/gpu_check.py
--profile` measures where a time step's GPU time goes; reports/gpu/ keeps its runs).

The study's reset gate (applied to h before W_h) is why the GRU needs two kernels each way: the
candidate's product needs r * h, so the gates r, z are finished before it and the candidate after.

Each kernel covers the B*H units of one time step in blocks; a unit's gate g of row b sits at column
g*H + j of that row. tanh is computed from exp (1 - 2 / (exp(2x) + 1)), the form Triton's CPU
interpreter also runs, so the tests run these kernels on a machine without a GPU
(TRITON_INTERPRET=1), in float64 and float32, against the readable cells.

Shapes: T time steps, B batch, H hidden units; time-major; every (B, H) buffer contiguous.
"""

from __future__ import annotations

from typing import NamedTuple

import triton
import triton.language as tl
from torch import Tensor

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


@triton.jit
def _grad_h(grad_out, from_later, mask, u, ok, HAS_LATER: tl.constexpr, HAS_MASK: tl.constexpr):
    """The gradient w.r.t. a time step's new h at the units u, where every backward kernel starts:
    (grad_out + from_later) * mask, from_later only after the last time step, mask only with dropout."""
    grad = tl.load(grad_out + u, mask=ok)
    if HAS_LATER:
        grad = grad + tl.load(from_later + u, mask=ok)
    if HAS_MASK:
        grad = grad * tl.load(mask + u, mask=ok)
    return grad


def _grid(n: int) -> tuple[int]:
    return (triton.cdiv(n, BLOCK),)


def _masks(masks: Tensor | None, T: int) -> tuple[Tensor | None, ...]:
    return (None,) * T if masks is None else masks.contiguous().unbind(0)


class BackwardStart(NamedTuple):
    """What every cell's backward starts from: the time steps T, the hidden size H, the n = B*H units
    of a time step, each time step's output gradient (B, H), contiguous, and its mask (B, H) or None."""

    T: int
    H: int
    n: int
    grad_out: tuple[Tensor, ...]
    mask: tuple[Tensor | None, ...]


def backward_start(grad_hs: Tensor, masks: Tensor | None) -> BackwardStart:
    """grad_hs (T, B, H), masks (T, B, H) or None -> the `BackwardStart` of a cell's backward loop."""
    T, B, H = grad_hs.shape
    return BackwardStart(T, H, B * H, grad_hs.contiguous().unbind(0), _masks(masks, T))
