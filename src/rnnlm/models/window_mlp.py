"""A Bengio-style fixed-window MLP language model (Bengio et al., 2003), the non-recurrent baseline.

The next token is predicted from the embeddings of the last `window` tokens, concatenated and
passed through tanh hidden layers to a linear output:

    x = [e(t - window + 1); ...; e(t)]      h = tanh(W_1 x + b_1) (, more hidden layers)
    logits = U h + b

(Bengio's direct input-to-output connections are left out.) Positions before the start of the
text are filled with a learned padding embedding, one extra row of the embedding table.

Same interface as the recurrent models: `forward(tokens (B, T), state=None) -> (logits (B, T, V),
state)`. The state is the model's window: the last `window - 1` tokens seen, (B, window - 1) int64;
None means padding only. So the two inference modes mean here what they mean for a GRU:
stateless (state reset before every token) sees a window of one token, stateful sees the full window.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from rnnlm.models.config import ModelConfig


class WindowMLP(nn.Module):
    """Embedding of a window of tokens -> tanh hidden layers (dropout between) -> Linear."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.window = config.window
        self.pad = config.vocab_size  # the id of the padding embedding
        self.embedding = nn.Embedding(config.vocab_size + 1, config.embd)
        widths = [config.window * config.embd] + [config.hidden] * config.layers
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        self.dropout = nn.Dropout(config.dropout)
        self.head = nn.Linear(config.hidden, config.vocab_size)

    @staticmethod
    def parameter_count(config: ModelConfig) -> int:
        """The parameters `config` describes, without building anything: the embedding (a padding
        row included), each hidden layer's weight and bias, the head's."""
        widths = [config.window * config.embd] + [config.hidden] * config.layers
        layers = sum((a + 1) * b for a, b in zip(widths, widths[1:]))
        return (config.vocab_size + 1) * config.embd + layers + (config.hidden + 1) * config.vocab_size

    def zero_state(self, batch: int, like: Tensor) -> Tensor:
        """A window of padding only: (B, window - 1)."""
        return like.new_full((batch, self.window - 1), self.pad)

    def forward(self, tokens: Tensor, state: Tensor | None = None, last_only: bool = False) -> tuple[Tensor, Tensor]:
        """tokens (B, T) int64, state (B, window - 1) or None -> logits (B, T, V), new state;
        `last_only`: the logits of the last time step alone, (B, 1, V)."""
        if state is None:
            state = self.zero_state(tokens.shape[0], tokens)
        context = torch.cat([state, tokens], dim=1)  # (B, window - 1 + T)
        windows = context.unfold(1, self.window, 1)  # (B, T, window): tokens t - window + 1 .. t
        if last_only:
            windows = windows[:, -1:]  # (B, 1, window)
        x = self.embedding(windows).flatten(2)  # (B, T, window * E)
        for layer in self.layers:
            x = self.dropout(torch.tanh(layer(x)))  # (B, T, hidden)
        return self.head(x), context[:, context.shape[1] - (self.window - 1) :]

    def description(self) -> list[str]:
        """What the model is, in words, for `rnnlm.models.kinds.summary`."""
        c = self.config
        return [f"{c.cell.upper()} language model, {c.layers} layer(s), embedding {c.embd}, hidden {c.hidden}, "
                f"vocabulary {c.vocab_size}, window {c.window} tokens",
                f"dropout {c.dropout} (between layers)",
                f"architecture: Embedding of {c.window} tokens, concatenated -> "
                + " -> ".join(f"{type(layer).__name__} + tanh" for layer in self.layers) + " -> Linear"]
