"""The two speed references the benchmark measures our models against. Not part of the library.

- `StepByStepLM`: the study's way of writing a cell, one `nn.Linear` per gate matrix and a Python
  loop over time steps with autograd recording every operation (dropout applied to each step's
  state, as the study does). For the GRU this is the study's cell; the LSTM and the tanh RNN are
  written the same way, so that every cell kind has a step-by-step reference.
- `TorchLM`: PyTorch's own `nn.GRU` / `nn.LSTM` / `nn.RNN` (tanh) with the same sizes. PyTorch's
  GRU is a different function (reset gate after the matrix, hidden-side biases), so it is a speed
  reference only, never a correctness one.

Both take tokens (B, T) and return logits (B, T, V), and expose `advance(tokens (B,), state)` for
stateful sampling, the state carried as each one naturally does; `sample_like_the_study` picks
their next tokens the way the study's sampling code does.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnnlm.models.config import ModelConfig


class _StepByStepCell(nn.Module):
    """One input-side Linear (with bias) and one hidden-side Linear (no bias) per gate."""

    gate_names: tuple[str, ...]

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.from_x = nn.ModuleDict({g: nn.Linear(input_size, hidden_size) for g in self.gate_names})
        self.from_h = nn.ModuleDict({g: nn.Linear(hidden_size, hidden_size, bias=False) for g in self.gate_names})

    def zero_state(self, batch: int, like: Tensor):
        return like.new_zeros(batch, self.hidden_size)

    @staticmethod
    def hidden(state):
        return state


class StudyGRUCell(_StepByStepCell):
    """The study's GRU: r and z with an extra bias each, the reset gate applied to h before W_h."""

    gate_names = ("r", "z", "n")

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.bias_r = nn.Parameter(torch.zeros(hidden_size))
        self.bias_z = nn.Parameter(torch.zeros(hidden_size))

    def forward(self, x: Tensor, h: Tensor) -> Tensor:
        r = torch.sigmoid(self.from_x["r"](x) + self.from_h["r"](h) + self.bias_r)
        z = torch.sigmoid(self.from_x["z"](x) + self.from_h["z"](h) + self.bias_z)
        candidate = torch.tanh(self.from_x["n"](x) + self.from_h["n"](r * h))
        return (1 - z) * h + z * candidate


class StepByStepLSTMCell(_StepByStepCell):
    gate_names = ("i", "f", "o", "g")

    def zero_state(self, batch: int, like: Tensor):
        return like.new_zeros(batch, self.hidden_size), like.new_zeros(batch, self.hidden_size)

    @staticmethod
    def hidden(state):
        return state[0]

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        h, c = state
        i = torch.sigmoid(self.from_x["i"](x) + self.from_h["i"](h))
        f = torch.sigmoid(self.from_x["f"](x) + self.from_h["f"](h))
        o = torch.sigmoid(self.from_x["o"](x) + self.from_h["o"](h))
        g = torch.tanh(self.from_x["g"](x) + self.from_h["g"](h))
        c = f * c + i * g
        return o * torch.tanh(c), c


class StepByStepRNNCell(_StepByStepCell):
    gate_names = ("h",)

    def forward(self, x: Tensor, h: Tensor) -> Tensor:
        return torch.tanh(self.from_x["h"](x) + self.from_h["h"](h))


_CELLS = {"gru": StudyGRUCell, "lstm": StepByStepLSTMCell, "rnn": StepByStepRNNCell}
_TORCH = {"gru": nn.GRU, "lstm": nn.LSTM, "rnn": nn.RNN}  # the yardsticks; the library names none of these


def yardsticks(config: ModelConfig) -> dict[str, nn.Module]:
    """The reference implementations that exist for `config`'s cell: "step-by-step" (the study's way)
    and "PyTorch" (its own recurrent layer); none for a cell that has neither (the benchmark then
    times ours beside its products alone)."""
    found: dict[str, nn.Module] = {}
    if config.cell in _CELLS:
        found["step-by-step"] = StepByStepLM(config)
    if config.cell in _TORCH:
        found["PyTorch"] = TorchLM(config)
    return found


def torch_name(cell: str) -> str | None:
    """"nn.GRU", "nn.LSTM", "nn.RNN", or None for a cell PyTorch has no layer of."""
    return f"nn.{_TORCH[cell].__name__}" if cell in _TORCH else None


class StepByStepLM(nn.Module):
    """Embedding -> step-by-step cells (dropout on each step's state) -> (LayerNorm) -> Linear."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        cell = _CELLS[config.cell]
        self.embedding = nn.Embedding(config.vocab_size, config.embd)
        self.cells = nn.ModuleList(
            cell(config.embd if i == 0 else config.hidden, config.hidden) for i in range(config.layers)
        )
        self.dropout = nn.Dropout(config.dropout)
        self.norm = nn.LayerNorm(config.hidden) if config.layer_norm else nn.Identity()
        self.head = nn.Linear(config.hidden, config.vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embedding(tokens)  # (B, T, E)
        for cell in self.cells:
            state = cell.zero_state(x.shape[0], x)
            outputs = []
            for t in range(x.shape[1]):
                state = cell(x[:, t], state)
                h = self.dropout(cell.hidden(state))
                state = (h, state[1]) if isinstance(state, tuple) else h
                outputs.append(h)
            x = torch.stack(outputs, dim=1)  # (B, T, H)
        return self.head(self.norm(x))

    def advance(self, tokens: Tensor, state: list | None) -> tuple[Tensor, list]:
        x = self.embedding(tokens)  # (B, E)
        new_state = []
        for i, cell in enumerate(self.cells):
            layer_state = cell(x, cell.zero_state(len(tokens), x) if state is None else state[i])
            x = cell.hidden(layer_state)
            new_state.append(layer_state)
        return self.head(self.norm(x)), new_state


class TorchLM(nn.Module):
    """Embedding -> nn.GRU / nn.LSTM / nn.RNN (dropout between layers) -> (LayerNorm) -> Linear."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        recurrent = _TORCH[config.cell]
        self.embedding = nn.Embedding(config.vocab_size, config.embd)
        dropout = config.dropout if config.layers > 1 else 0.0
        self.recurrent = recurrent(config.embd, config.hidden, config.layers, batch_first=True, dropout=dropout)
        self.norm = nn.LayerNorm(config.hidden) if config.layer_norm else nn.Identity()
        self.head = nn.Linear(config.hidden, config.vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        x, _ = self.recurrent(self.embedding(tokens))  # (B, T, H)
        return self.head(self.norm(x))

    def advance(self, tokens: Tensor, state) -> tuple[Tensor, object]:
        x, state = self.recurrent(self.embedding(tokens)[:, None], state)  # (B, 1, H)
        return self.head(self.norm(x[:, 0])), state


def sample_like_the_study(logits: Tensor, temperature: float, generator: torch.Generator) -> Tensor:
    """Next ids (B,) from logits (B, V) as the study samples: softmax at `temperature`, then
    `torch.multinomial`."""
    return torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator).squeeze(-1)
