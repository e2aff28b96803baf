"""Recurrent cells written by hand, and layers that run them over a sequence.

Each cell holds its weights in a fused layout (all gates' input-side matrices stacked in one
`weight_ih`, the hidden-side ones in one `weight_hh`) and has a readable `step(x, state)` that
spells out the equations gate by gate. Each layer runs its cell over a sequence in two ways that
compute the same function:

- `reference_forward`: the cell's `step`, one time step after another;
- `forward` (used for training and sampling): the input-side products of all time steps in one
  matrix product, then per step only the hidden-side products, with the gates that can share one
  product fused into it.

Layer in:  x (B, T, I), state (None means zeros), optional dropout masks (T, B, H).
Layer out: outputs (B, T, H) (the hidden state of every step) and the final state.
A state is h (B, H) for the GRU and the tanh RNN, and (h, c) for the LSTM.

Dropout (`drop_state=True`, the study's choice) multiplies each step's new hidden state by a
mask, so the dropped state is both the step's output and what the next step receives. The
masks for a whole sequence are drawn up front, so both forms can be given the same ones.
"""

from __future__ import annotations

import math
from typing import Union

import torch
from torch import Tensor, nn

State = Union[Tensor, tuple[Tensor, Tensor]]


def _uniform_(tensor: Tensor, fan_in: int) -> None:
    """nn.Linear's default initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), per gate matrix."""
    bound = 1.0 / math.sqrt(fan_in)
    nn.init.uniform_(tensor, -bound, bound)


class _Cell(nn.Module):
    """What the cells share: every gate's input-side matrix stacked in `weight_ih` (G*H, I) with its
    bias `bias_ih`, the hidden-side matrices stacked in `weight_hh` (G*H, H), and a state that is
    h alone (the LSTM overrides the three state methods for (h, c))."""

    gates: int

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        rows = self.gates * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(rows, input_size))
        self.bias_ih = nn.Parameter(torch.empty(rows))
        self.weight_hh = nn.Parameter(torch.empty(rows, hidden_size))

    def reset_parameters(self) -> None:
        _uniform_(self.weight_ih, self.input_size)
        _uniform_(self.bias_ih, self.input_size)
        _uniform_(self.weight_hh, self.hidden_size)

    def zero_state(self, batch: int, like: Tensor) -> Tensor:
        return like.new_zeros(batch, self.hidden_size)

    @staticmethod
    def hidden(state: Tensor) -> Tensor:
        return state

    @staticmethod
    def with_hidden(state: Tensor, h: Tensor) -> Tensor:
        return h


class GRUCell(_Cell):
    """The study's GRU: the reset gate scales h *before* its matrix (unlike PyTorch's GRU).

        r  = sigmoid(W_rx x + b_rx + W_rh h + b_r)
        z  = sigmoid(W_zx x + b_zx + W_zh h + b_z)
        h~ = tanh(W_x x + b_x + W_h (r * h))
        h' = (1 - z) * h + z * h~

    Hidden-side matrices have no bias; r and z each have one extra bias vector (b_r, b_z).
    Rows of weight_ih: W_rx, W_zx, W_x; of bias_ih: b_rx, b_zx, b_x; of weight_hh: W_rh, W_zh, W_h.
    Parameters: 3*I*H + 3*H*H + 5*H.
    """

    gates = 3

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.bias_rz = nn.Parameter(torch.zeros(2 * hidden_size))  # b_r, b_z
        self.reset_parameters()

    def reset_parameters(self) -> None:
        super().reset_parameters()
        nn.init.zeros_(self.bias_rz)

    def step(self, x: Tensor, h: Tensor) -> Tensor:
        """One step, gate by gate. x (B, I), h (B, H) -> h' (B, H)."""
        W_rx, W_zx, W_x = self.weight_ih.chunk(3)
        b_rx, b_zx, b_x = self.bias_ih.chunk(3)
        W_rh, W_zh, W_h = self.weight_hh.chunk(3)
        b_r, b_z = self.bias_rz.chunk(2)
        r = torch.sigmoid(x @ W_rx.T + b_rx + h @ W_rh.T + b_r)
        z = torch.sigmoid(x @ W_zx.T + b_zx + h @ W_zh.T + b_z)
        candidate = torch.tanh(x @ W_x.T + b_x + (r * h) @ W_h.T)
        return (1 - z) * h + z * candidate


class LSTMCell(_Cell):
    """An LSTM with one bias per gate, on the input side only.

        i = sigmoid(W_xi x + b_i + W_hi h)      f = sigmoid(W_xf x + b_f + W_hf h)
        o = sigmoid(W_xo x + b_o + W_ho h)      g = tanh(W_xg x + b_g + W_hg h)
        c' = f * c + i * g                      h' = o * tanh(c')

    Gate rows in the fused matrices: i, f, o, g. Parameters: 4*I*H + 4*H + 4*H*H.
    """

    gates = 4

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.reset_parameters()

    def zero_state(self, batch: int, like: Tensor) -> tuple[Tensor, Tensor]:
        zeros = like.new_zeros(batch, self.hidden_size)
        return zeros, zeros.clone()

    @staticmethod
    def hidden(state: tuple[Tensor, Tensor]) -> Tensor:
        return state[0]

    @staticmethod
    def with_hidden(state: tuple[Tensor, Tensor], h: Tensor) -> tuple[Tensor, Tensor]:
        return h, state[1]

    def step(self, x: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """One step, gate by gate. x (B, I), (h, c) each (B, H) -> (h', c')."""
        h, c = state
        W_xi, W_xf, W_xo, W_xg = self.weight_ih.chunk(4)
        b_i, b_f, b_o, b_g = self.bias_ih.chunk(4)
        W_hi, W_hf, W_ho, W_hg = self.weight_hh.chunk(4)
        i = torch.sigmoid(x @ W_xi.T + b_i + h @ W_hi.T)
        f = torch.sigmoid(x @ W_xf.T + b_f + h @ W_hf.T)
        o = torch.sigmoid(x @ W_xo.T + b_o + h @ W_ho.T)
        g = torch.tanh(x @ W_xg.T + b_g + h @ W_hg.T)
        c = f * c + i * g
        return o * torch.tanh(c), c


class RNNCell(_Cell):
    """The plain (Elman) tanh RNN: h' = tanh(W_x x + b + W_h h). Parameters: I*H + H + H*H."""

    gates = 1

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.reset_parameters()

    def step(self, x: Tensor, h: Tensor) -> Tensor:
        """One step. x (B, I), h (B, H) -> h' (B, H)."""
        return torch.tanh(x @ self.weight_ih.T + self.bias_ih + h @ self.weight_hh.T)


class RecurrentLayer(nn.Module):
    """A cell run over a sequence; subclasses provide the cell and the fast `_scan`."""

    cell_class: type[_Cell]

    def __init__(self, input_size: int, hidden_size: int, dropout: float = 0.0, drop_state: bool = True):
        super().__init__()
        self.cell = self.cell_class(input_size, hidden_size)
        self.dropout = dropout
        self.drop_state = drop_state

    @property
    def hidden_size(self) -> int:
        return self.cell.hidden_size

    def dropout_masks(self, steps: int, batch: int, like: Tensor) -> Tensor | None:
        """Masks (T, B, H) scaled by 1/(1-p) for state dropout, or None when it is off."""
        if not (self.training and self.drop_state and self.dropout > 0):
            return None
        keep = 1.0 - self.dropout
        return like.new_empty(steps, batch, self.hidden_size).bernoulli_(keep).div_(keep)

    def _prepare(self, x: Tensor, state: State | None, masks: Tensor | None) -> tuple[State, Tensor | None]:
        B, T, _ = x.shape
        if state is None:
            state = self.cell.zero_state(B, x)
        if masks is None:
            masks = self.dropout_masks(T, B, x)
        return state, masks

    def reference_forward(
        self, x: Tensor, state: State | None = None, masks: Tensor | None = None
    ) -> tuple[Tensor, State]:
        """The cell's readable `step`, applied one time step after another."""
        state, masks = self._prepare(x, state, masks)
        outputs = []
        for t in range(x.shape[1]):
            state = self.cell.step(x[:, t], state)
            if masks is not None:
                state = self.cell.with_hidden(state, self.cell.hidden(state) * masks[t])
            outputs.append(self.cell.hidden(state))
        return torch.stack(outputs, dim=1), state

    def forward(self, x: Tensor, state: State | None = None, masks: Tensor | None = None) -> tuple[Tensor, State]:
        """The fast form: x (B, T, I) -> outputs (B, T, H), final state."""
        state, masks = self._prepare(x, state, masks)
        cell = self.cell
        # All time steps' input-side products at once, time-major so each step's slice is contiguous.
        gates_x = torch.nn.functional.linear(x.transpose(0, 1), cell.weight_ih, cell.bias_ih)  # (T, B, G*H)
        outputs, state = self._scan(gates_x, state, masks)
        return torch.stack(outputs, dim=1), state

    def _scan(self, gates_x: Tensor, state: State, masks: Tensor | None) -> tuple[list[Tensor], State]:
        raise NotImplementedError


class GRULayer(RecurrentLayer):
    """The study's GRU over a sequence. Per step: one (H -> 2H) product for r and z, one (H -> H)."""

    cell_class = GRUCell

    def _scan(self, gates_x: Tensor, h: Tensor, masks: Tensor | None) -> tuple[list[Tensor], Tensor]:
        H = self.hidden_size
        weight_rz, weight_n = self.cell.weight_hh[: 2 * H], self.cell.weight_hh[2 * H :]
        x_rz = gates_x[..., : 2 * H] + self.cell.bias_rz  # (T, B, 2H): both r/z biases folded in once
        x_n = gates_x[..., 2 * H :]  # (T, B, H)
        outputs = []
        for t in range(gates_x.shape[0]):
            rz = torch.sigmoid(torch.addmm(x_rz[t], h, weight_rz.T))  # (B, 2H)
            r, z = rz[:, :H], rz[:, H:]
            candidate = torch.tanh(torch.addmm(x_n[t], r * h, weight_n.T))  # (B, H)
            h = torch.lerp(h, candidate, z)  # (1 - z) * h + z * candidate
            if masks is not None:
                h = h * masks[t]
            outputs.append(h)
        return outputs, h


class LSTMLayer(RecurrentLayer):
    """The LSTM over a sequence. Per step: one (H -> 4H) product for all four gates."""

    cell_class = LSTMCell

    def _scan(
        self, gates_x: Tensor, state: tuple[Tensor, Tensor], masks: Tensor | None
    ) -> tuple[list[Tensor], tuple[Tensor, Tensor]]:
        H = self.hidden_size
        h, c = state
        weight_hh_t = self.cell.weight_hh.T
        outputs = []
        for t in range(gates_x.shape[0]):
            gates = torch.addmm(gates_x[t], h, weight_hh_t)  # (B, 4H): i, f, o, g
            ifo = torch.sigmoid(gates[:, : 3 * H])
            g = torch.tanh(gates[:, 3 * H :])
            c = torch.addcmul(ifo[:, H : 2 * H] * c, ifo[:, :H], g)  # f * c + i * g
            h = ifo[:, 2 * H :] * torch.tanh(c)
            if masks is not None:
                h = h * masks[t]
            outputs.append(h)
        return outputs, (h, c)


class RNNLayer(RecurrentLayer):
    """The tanh RNN over a sequence. Per step: one (H -> H) product."""

    cell_class = RNNCell

    def _scan(self, gates_x: Tensor, h: Tensor, masks: Tensor | None) -> tuple[list[Tensor], Tensor]:
        weight_hh_t = self.cell.weight_hh.T
        outputs = []
        for t in range(gates_x.shape[0]):
            h = torch.tanh(torch.addmm(gates_x[t], h, weight_hh_t))
            if masks is not None:
                h = h * masks[t]
            outputs.append(h)
        return outputs, h


LAYERS: dict[str, type[RecurrentLayer]] = {"gru": GRULayer, "lstm": LSTMLayer, "rnn": RNNLayer}
"""The layer class for each `cell:` value of params.yaml."""
