"""Recurrent cells written by hand, and layers that run them over a sequence.

Each cell holds its weights in a fused layout (all gates' input-side matrices stacked in one
`weight_ih`, the hidden-side ones in one `weight_hh`) and has a readable `step(x, state)` that
spells out the equations gate by gate. Each layer runs its cell over a sequence in two ways that
compute the same function:

- `reference_forward`: the cell's `step`, one time step after another;
- `forward` (used for training and sampling): the input-side products of all time steps in one
  matrix product (`input_products`), then `scan`: per step only the hidden-side products, with a
  backward pass written by hand (see `rnnlm.scans`).

Layer in:  x (B, T, I), state (None means zeros), optional dropout masks (T, B, H).
Layer out: outputs (B, T, H) (the hidden state of every step) and the final state.
`scan` is the time-major core: input products (T, B, G*H) in, states (T, B, H) out; the model
calls it directly, so that its first layer can take its input products from a table.
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

from rnnlm.scans import GRUScan, LSTMScan, RNNScan

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
        """Masks (T, B, H) of 0 and 1/keep for state dropout, or None when it is off.

        A unit is kept when a uniform 16-bit integer falls below round(keep * 2^16). The integers
        are the four 16-bit lanes of 64-bit draws: a quarter of the generator calls of one draw per
        unit, and drawing is most of a mask's cost. The keep probability is then within 2^-17 of
        1 - p (0.899994 for p = 0.1), and the scale uses that exact probability, so the expected
        mask is exactly 1.
        """
        if not (self.training and self.drop_state and self.dropout > 0):
            return None
        threshold = round((1.0 - self.dropout) * 2**16)
        units = steps * batch * self.hidden_size
        words = torch.empty((units + 3) // 4, dtype=torch.int64, device=like.device).random_(-(2**63), 2**63 - 1)
        draws = words.view(torch.int16)[:units].view(steps, batch, self.hidden_size)  # uniform on [-2^15, 2^15)
        kept = draws < threshold - 2**15
        return kept.to(like.dtype).mul_(2**16 / threshold)  # a Python scale: no host-to-device copy

    def _prepare(self, batch: int, steps: int, like: Tensor, state: State | None, masks: Tensor | None):
        if state is None:
            state = self.cell.zero_state(batch, like)
        if masks is None:
            masks = self.dropout_masks(steps, batch, like)
        return state, masks

    def reference_forward(
        self, x: Tensor, state: State | None = None, masks: Tensor | None = None
    ) -> tuple[Tensor, State]:
        """The cell's readable `step`, applied one time step after another."""
        B, T, _ = x.shape
        state, masks = self._prepare(B, T, x, state, masks)
        outputs = []
        for t in range(x.shape[1]):
            state = self.cell.step(x[:, t], state)
            if masks is not None:
                state = self.cell.with_hidden(state, self.cell.hidden(state) * masks[t])
            outputs.append(self.cell.hidden(state))
        return torch.stack(outputs, dim=1), state

    def forward(self, x: Tensor, state: State | None = None, masks: Tensor | None = None) -> tuple[Tensor, State]:
        """The fast form: x (B, T, I) -> outputs (B, T, H) (a view of time-major memory), final state."""
        hs, state = self.scan(self.input_products(x.transpose(0, 1)), state, masks)  # (T, B, H)
        return hs.transpose(0, 1), state

    def input_products(self, x: Tensor) -> Tensor:
        """x (T, B, I) -> x W_ih^T (T, B, G*H) for every step in one product; the biases come in `scan`."""
        return torch.matmul(x, self.cell.weight_ih.T)

    def scan(self, products: Tensor, state: State | None = None, masks: Tensor | None = None) -> tuple[Tensor, State]:
        """Input products (T, B, G*H) -> the state after every step (T, B, H), and the final state.

        The products are consumed: a contiguous `products` is overwritten with the activated gates
        (pass a clone to keep it)."""
        T, B, _ = products.shape
        state, masks = self._prepare(B, T, products, state, masks)
        return self._scan(products.contiguous(), state, masks)

    def _scan(self, products: Tensor, state: State, masks: Tensor | None) -> tuple[Tensor, State]:
        raise NotImplementedError


class GRULayer(RecurrentLayer):
    """The study's GRU over a sequence (see `scans.GRUScan`)."""

    cell_class = GRUCell

    def _scan(self, products: Tensor, h: Tensor, masks: Tensor | None) -> tuple[Tensor, Tensor]:
        c = self.cell
        hs, _ = GRUScan.apply(products, h, c.weight_hh, c.bias_ih, c.bias_rz, masks)
        return hs, hs[-1]


class LSTMLayer(RecurrentLayer):
    """The LSTM over a sequence (see `scans.LSTMScan`)."""

    cell_class = LSTMCell

    def _scan(
        self, products: Tensor, state: tuple[Tensor, Tensor], masks: Tensor | None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        hs, c_last, _ = LSTMScan.apply(products, state[0], state[1], self.cell.weight_hh, self.cell.bias_ih, masks)
        return hs, (hs[-1], c_last)


class RNNLayer(RecurrentLayer):
    """The tanh RNN over a sequence (see `scans.RNNScan`)."""

    cell_class = RNNCell

    def _scan(self, products: Tensor, h: Tensor, masks: Tensor | None) -> tuple[Tensor, Tensor]:
        hs, _ = RNNScan.apply(products, h, self.cell.weight_hh, self.cell.bias_ih, masks)
        return hs, hs[-1]


LAYERS: dict[str, type[RecurrentLayer]] = {"gru": GRULayer, "lstm": LSTMLayer, "rnn": RNNLayer}
"""The layer class for each `cell:` value of params.yaml."""
