"""The study's GRU, one slice: readable cell, Python loops, gradient assembly, layer, sampling advance.

Its compiled loops are compute's `cpp/gru.cpp`, its Triton loops `gru_triton.py` beside this file; tests
hold all three to `GRUCell.advance` in float64 (see `base` for what the loops do and why).

The study's reset gate scales h *before* its matrix (PyTorch's GRU scales the product instead), so a
step needs r before the candidate's product: two hidden-side products per time step, not one.
Gate order in the fused matrices: r, z, n (the candidate).
"""

from __future__ import annotations


import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from rnnlm.compute.products import t_mm
from rnnlm.models.cells.layer_advance import LayerAdvance
from rnnlm.models.cells.base import (
    Cell,
    CellSpec,
    Loops,
    RecurrentLayer,
    consumed,
    grad_into_state,
    loops_for,
    or_zeros,
    overwritten,
    state_weight_gradient,
    time_steps_of,
    sigmoid_backward,
    tanh_backward,
)


class GRUCell(Cell):
    """The study's GRU:

        r  = sigmoid(W_rx x + b_rx + W_rh h + b_r)
        z  = sigmoid(W_zx x + b_zx + W_zh h + b_z)
        h~ = tanh(W_x x + b_x + W_h (r * h))
        h' = (1 - z) * h + z * h~

    Hidden-side matrices have no bias; r and z each have one extra bias vector (b_r, b_z).
    Rows of weight_ih: W_rx, W_zx, W_x; of bias_ih: b_rx, b_zx, b_x; of weight_hh: W_rh, W_zh, W_h.
    Parameters: 3*I*H + 3*H*H + 5*H.
    """

    gates = 3

    @classmethod
    def parameter_shapes(cls, input_size: int, hidden_size: int) -> dict[str, tuple[int, ...]]:
        return {**super().parameter_shapes(input_size, hidden_size), "bias_rz": (2 * hidden_size,)}  # b_r, b_z

    def reset_parameters(self) -> None:
        super().reset_parameters()
        nn.init.zeros_(self.bias_rz)

    def recur(self, gates_x: Tensor, h: Tensor) -> Tensor:
        """One time step. gates_x (B, 3H): the input-side pre-activations of r, z and h~ with every bias
        (`input_bias`), h (B, H) -> h' (B, H)."""
        H = self.hidden_size
        rz_x, candidate_x = gates_x.split([2 * H, H], dim=1)
        W_rzh, W_h = self.weight_hh.split([2 * H, H])
        r, z = torch.sigmoid(rz_x + h @ W_rzh.T).chunk(2, dim=1)
        candidate = torch.tanh(candidate_x + (r * h) @ W_h.T)
        return (1 - z) * h + z * candidate

    def input_bias(self) -> Tensor:
        return fold_bias(self.bias_ih, self.bias_rz)


def fold_bias(bias_ih: Tensor, bias_rz: Tensor) -> Tensor:
    """(3H): b_rx + b_r, b_zx + b_z, b_x: every bias of each gate's pre-activation in one vector."""
    H = bias_rz.shape[0] // 2
    return torch.cat([bias_ih[: 2 * H] + bias_rz, bias_ih[2 * H :]])


# ------------------------------------------------------------------ Python loops (the reference)


def forward(products, h0, weight_hh, bias, masks):
    """products (T, B, 3H), overwritten with the activated gates (r, z, candidate); h0 (B, H),
    weight_hh (3H, H), bias (3H) folded (`fold_bias`), masks? -> hs (T, B, H), reset_h (T, B, H) = r * h_prev."""
    T, B, _ = products.shape
    H = h0.shape[1]
    gates = products
    bias_r_z, bias_n = bias[: 2 * H], bias[2 * H :]
    rz_t, n_t = weight_hh[: 2 * H].T, weight_hh[2 * H :].T
    reset_h = gates.new_empty(T, B, H)
    hs = gates.new_empty(T, B, H)
    rz_pre, n_pre = gates[..., : 2 * H].unbind(0), gates[..., 2 * H :].unbind(0)
    h = h0
    for t, (r_h, h_new, mask) in enumerate(zip(reset_h.unbind(0), hs.unbind(0), time_steps_of(masks, T))):
        rz = rz_pre[t].add_(bias_r_z).addmm_(h, rz_t).sigmoid_()  # (B, 2H)
        torch.mul(rz[:, :H], h, out=r_h)
        candidate = n_pre[t].add_(bias_n).addmm_(r_h, n_t).tanh_()  # (B, H)
        h = torch.lerp(h, candidate, rz[:, H:], out=h_new)  # (1 - z) h + z candidate
        if mask is not None:
            h.mul_(mask)
    return hs, reset_h


def backward(grad_hs, h0, weight_hh, gates, hs, masks):
    """grad_hs (T, B, H) and what `forward` saved; gates is overwritten with their gradients
    w.r.t. the pre-activations -> grad_h0 (B, H)."""
    T, B, H = hs.shape
    weight_rz, weight_n = weight_hh[: 2 * H], weight_hh[2 * H :]
    grad_gates = gates
    r, z, candidate = time_steps_of(gates[..., :H], T), time_steps_of(gates[..., H : 2 * H], T), time_steps_of(gates[..., 2 * H :], T)
    grad_r, grad_z = time_steps_of(grad_gates[..., :H], T), time_steps_of(grad_gates[..., H : 2 * H], T)
    grad_rz, grad_n = time_steps_of(grad_gates[..., : 2 * H], T), time_steps_of(grad_gates[..., 2 * H :], T)
    h_prev, grad_out, mask = (h0, *hs[:-1].unbind(0)), grad_hs.unbind(0), time_steps_of(masks, T)
    grad_h = None
    for t in range(T - 1, -1, -1):
        grad = grad_into_state(grad_out[t], grad_h, mask[t])  # (B, H)
        grad_through_z = grad * z[t]
        sigmoid_backward(grad * (candidate[t] - h_prev[t]), z[t], grad_input=grad_z[t])
        tanh_backward(grad_through_z, candidate[t], grad_input=grad_n[t])
        grad_reset_h = grad_n[t] @ weight_n  # (B, H), w.r.t. r * h_prev
        grad_h = (grad - grad_through_z).addcmul_(grad_reset_h, r[t])  # the direct paths to h_prev
        sigmoid_backward(grad_reset_h * h_prev[t], r[t], grad_input=grad_r[t])
        grad_h.addmm_(grad_rz[t], weight_rz)  # through r and z
    return grad_h


def advance(gates_x, h, rz_t, n_t):
    """One token: gates_x (B, 3H) the input-side products with every bias added, h (B, H),
    rz_t (H, 2H), n_t (H, H) transposed hidden-side matrices -> the new h (B, H)."""
    H = h.shape[1]
    rz = torch.addmm(gates_x[:, : 2 * H], h, rz_t).sigmoid_()  # (B, 2H)
    candidate = torch.addmm(gates_x[:, 2 * H :], rz[:, :H] * h, n_t).tanh_()  # (B, H)
    return torch.lerp(h, candidate, rz[:, H:])


# ------------------------------------------------------------------ gradient assembly and layer


class GRUScan(torch.autograd.Function):
    """The GRU over T time steps.

    In:  spec (whose loops run); products (T, B, 3H) = x W_ih^T for r, z, candidate, contiguous,
         consumed: overwritten with the activated gates; h0 (B, H); weight_hh (3H, H); bias_ih (3H);
         bias_rz (2H); masks (T, B, H) or None.
    Out: hs (T, B, H), the state after every time step (the last one is the final state), and the
         gates (the products tensor itself, not differentiable).
    """

    @staticmethod
    def forward(ctx, spec, products, h0, weight_hh, bias_ih, bias_rz, masks):
        bias = fold_bias(bias_ih, bias_rz)
        hs, reset_h = loops_for(spec, products).forward(products, h0, weight_hh, bias, masks)
        gates = consumed(ctx, products)
        ctx.spec = spec
        ctx.save_for_backward(h0, weight_hh, gates, reset_h, hs, masks)
        return hs, gates

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_hs, _):
        h0, weight_hh, gates, reset_h, hs, masks = ctx.saved_tensors
        T, B, H = hs.shape
        grad_hs = or_zeros(grad_hs, hs)
        grad_h0 = loops_for(ctx.spec, hs).backward(grad_hs, h0, weight_hh, gates, hs, masks)
        grad_gates = overwritten(gates)
        grad_weight_hh = torch.cat(
            [
                state_weight_gradient(grad_gates[..., : 2 * H], h0, hs),
                t_mm(grad_gates[..., 2 * H :].reshape(T * B, H), reset_h.view(T * B, H)),
            ]
        )
        grad_bias_ih = grad_gates.sum((0, 1))
        # bias_rz's gradient is bias_ih's r and z part, copied so the two .grad tensors never share memory.
        return None, grad_gates, grad_h0, grad_weight_hh, grad_bias_ih, grad_bias_ih[: 2 * H].clone(), None


class GRULayer(RecurrentLayer):
    """The study's GRU over a sequence."""

    cell_class = GRUCell

    def _scan(self, products: Tensor, h: Tensor, masks: Tensor | None) -> tuple[Tensor, Tensor]:
        c = self.cell
        hs, _ = GRUScan.apply(self.spec, products, h, c.weight_hh, c.bias_ih, c.bias_rz, masks)
        return hs, hs[-1]


class GRUAdvance(LayerAdvance):
    """The hidden-side matrices as two transposed views: rz_t (H, 2H) and n_t (H, H)."""

    @staticmethod
    def arrange_hidden(cell: Cell) -> list[Tensor]:
        H = cell.hidden_size
        return [cell.weight_hh[: 2 * H].T, cell.weight_hh[2 * H :].T]


def triton_loops() -> Loops:
    """The loops CUDA runs: the Triton forward and backward of `gru_triton.py`, imported only when
    asked (Triton comes with them), and the Python advance by one token (a few cuBLAS calls)."""
    import rnnlm.models.cells.gru_triton as on_cuda

    return Loops(on_cuda.forward, on_cuda.backward, advance)


SPEC = CellSpec(
    name="gru",
    layer=GRULayer,
    layer_advance=GRUAdvance,
    python_loops=Loops(forward, backward, advance),
    triton_loops=triton_loops,
    hidden_products=(2, 1),  # the candidate's product needs r * h first: r and z's rows, then its own
)
