"""Teacher-forced scoring of a model on a token sequence.

`windowed_nll(model, tokens, window)` cuts the sequence into consecutive windows of `window`
tokens, runs each from a zero state (batched, not a loop over tokens) and returns the total
negative log-likelihood in nats and the number of predicted tokens. With `window` = the training
sequence length this is the validation loss; with window = k it is the loss of a model whose state
is reset every k tokens (k = 1: stateless).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from rnnlm.model import RecurrentLM


@dataclass(frozen=True)
class Score:
    """Total negative log-likelihood (nats) over `tokens` predicted tokens."""

    nats: float
    tokens: int

    @property
    def mean(self) -> float:
        return self.nats / self.tokens


def _windows(tokens: Tensor, window: int) -> list[tuple[Tensor, Tensor]]:
    """(inputs, targets) blocks: full windows (N, window) and, if any, the shorter tail (1, r)."""
    n_pred = tokens.numel() - 1
    full = n_pred // window
    blocks = []
    if full:
        inputs = tokens[: full * window].view(full, window)
        targets = tokens[1 : full * window + 1].view(full, window)
        blocks.append((inputs, targets))
    rest = n_pred - full * window
    if rest:
        start = full * window
        blocks.append((tokens[start : start + rest].view(1, rest), tokens[start + 1 : start + rest + 1].view(1, rest)))
    return blocks


@torch.no_grad()
def windowed_nll(model: RecurrentLM, tokens: Tensor, window: int, batch_windows: int = 256) -> Score:
    """Score `tokens` (1-D, int64) in windows of `window` tokens, each from a zero state.

    Every token after the first is predicted exactly once. `batch_windows` windows run at once.
    """
    if tokens.dim() != 1 or tokens.numel() < 2:
        raise ValueError("tokens must be a 1-D sequence of at least 2 ids")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    total = 0.0
    for inputs, targets in _windows(tokens, window):
        for start in range(0, inputs.shape[0], batch_windows):
            x = inputs[start : start + batch_windows].to(device)  # (b, window)
            y = targets[start : start + batch_windows].to(device)
            logits, _ = model(x)  # (b, window, V)
            if logits.dtype in (torch.float16, torch.bfloat16):
                logits = logits.float()  # sum the loss at full precision under autocast
            total += F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
    model.train(was_training)
    return Score(nats=total, tokens=tokens.numel() - 1)
