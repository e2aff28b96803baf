"""Teacher-forced scoring of a model on a token sequence: total nats over predicted tokens.

- `windowed_nll(model, tokens, window)`: the sequence cut into consecutive windows of `window`
  tokens, each run from a zero state, many windows per batch (not a loop over tokens). With the
  training sequence length this is the validation loss; with window = k it is the loss of a model
  whose state is reset every k tokens (k = 1: the stateless mode).
- `batch_nll(model, inputs, targets)`: one batch of windows, the study's validation estimator.
- `streamed_nll(model, tokens)`: the state carried across the whole sequence (never reset),
  streamed through in chunks: the stateful mode (`streamed_token_nll`: each token's loss).

`windowed_nll` and `streamed_nll` predict every token after the first exactly once, so their totals compare directly.
`bits_per_char` puts token-level totals on a per-character scale, so character and SentencePiece
models compare on one axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from rnnlm.evaluation.stream_graph import StreamGraph
from rnnlm.models.kinds import LanguageModel


@dataclass(frozen=True)
class Score:
    """Total negative log-likelihood (nats) over `tokens` predicted tokens."""

    nats: float
    tokens: int

    @property
    def mean(self) -> float:
        return self.nats / self.tokens

    def bits_per_char(self, chars: int) -> float:
        """The total in bits, per character of the predicted text."""
        return bits_per_char(self.nats, chars)


def bits_per_char(nats: float, chars: int) -> float:
    """Total nats over `chars` characters, in bits: nats / chars / ln 2."""
    return nats / chars / math.log(2)


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


def full_precision(logits: Tensor) -> Tensor:
    """Logits in float32 at least (half-precision ones, as under autocast, are upcast; float64 stays)."""
    return logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits


def _nats(logits: Tensor, targets: Tensor) -> Tensor:
    """Summed cross-entropy of logits (..., V) against targets (...): a 0-d float64 tensor on the
    device, so that a scoring loop reads one total at its end instead of waiting on every batch."""
    return F.cross_entropy(full_precision(logits).flatten(0, -2), targets.flatten(), reduction="sum").double()


CUDA_BATCH_TOKENS = 2**27
"""On CUDA, hidden units times tokens of one scoring batch (see `batch_tokens`)."""


def batch_tokens(device: torch.device, hidden: int, on_cpu: int) -> int:
    """Tokens per scoring batch of a model `hidden` units wide on `device`: `on_cpu` on the CPU, where
    the caller sizes batches for the caches; on CUDA 2^27 / hidden (131,072 at 1,024 units), for there
    each time step of a batch costs a few kernel launches however wide the batch is, so the fewest,
    widest batches are fastest, and this wide a batch's gate pre-activations take at most 2 GiB a
    layer (4 gates x 2^27 x 4 bytes), room for five runs sharing one GPU."""
    return max(1, CUDA_BATCH_TOKENS // hidden) if device.type == "cuda" else on_cpu


def _check(tokens: Tensor) -> None:
    if tokens.dim() != 1 or tokens.numel() < 2:
        raise ValueError("tokens must be a 1-D sequence of at least 2 ids")


@torch.no_grad()
def windowed_total(model: LanguageModel, tokens: Tensor, window: int, batch_windows: int | None = None,
                   token_nll: Tensor | None = None) -> Tensor:
    """Total nats (a 0-d float64 tensor on the model's device, not read back) of `tokens` (1-D,
    int64) scored in windows of `window` tokens, each from a zero state.

    `batch_windows` windows run at once; by default as many as make about 16k tokens on the CPU
    (`batch_tokens` on CUDA). `token_nll`,
    when given ((len(tokens) - 1,) on the device), also receives each predicted token's loss, entry
    t - 1 for tokens[t] (an extra output: the total is summed as without it).
    """
    _check(tokens)
    device = next(model.parameters()).device
    batch_windows = batch_windows or max(1, batch_tokens(device, model.config.hidden, 16384) // window)
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)
    done = 0  # predicted tokens so far: the windows run in the sequence's order
    for inputs, targets in _windows(tokens, window):
        for start in range(0, inputs.shape[0], batch_windows):
            x = inputs[start : start + batch_windows].to(device)  # (b, window)
            y = targets[start : start + batch_windows].to(device)
            logits, _ = model(x)  # (b, window, V)
            total += _nats(logits, y)
            if token_nll is not None:
                token_nll[done : done + y.numel()] = F.cross_entropy(full_precision(logits).flatten(0, -2),
                                                                     y.flatten(), reduction="none")
            done += y.numel()
    model.train(was_training)
    return total


def _chunk_losses(logits: Tensor, targets: Tensor) -> Tensor:
    """logits (1, c, V), targets (1, c) -> each target's loss (c,), in the logits' precision (float32 at least)."""
    return F.cross_entropy(full_precision(logits[0]), targets[0], reduction="none")


@torch.no_grad()
def streamed_token_nll(model: LanguageModel, tokens: Tensor, chunk: int = 4096, graph: bool | None = None) -> Tensor:
    """Each predicted token's loss in nats with the state carried across the whole sequence (one
    stream, fed `chunk` tokens at a time): (len(tokens) - 1,) on the model's device, in the logits'
    precision (float32 at least), entry t - 1 for tokens[t].

    `graph` (by default: on CUDA, when the stream has more than two whole chunks) replays the
    chunks after the first from one captured CUDA graph (`stream_graph`): the same kernels without a
    launch from Python for each of them; a shorter last chunk runs eagerly."""
    _check(tokens)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    whole = (tokens.numel() - 1) // chunk
    graph = device.type == "cuda" and whole > 2 if graph is None else graph
    losses, state, replay = [], None, None
    for start in range(0, tokens.numel() - 1, chunk):
        x = tokens[start : start + chunk][None].to(device)  # (1, c)
        y = tokens[start + 1 : start + chunk + 1][None].to(device)
        x = x[:, : y.shape[1]]
        if graph and replay is None and y.shape[1] == chunk:
            replay = StreamGraph(model, x, y, _chunk_losses)
            losses.append(replay.first)
        elif replay is not None and y.shape[1] == chunk:
            losses.append(replay(x, y))
        else:
            logits, state = model(x, replay.state() if replay is not None else state)  # (1, c, V)
            losses.append(_chunk_losses(logits, y))
    model.train(was_training)
    return torch.cat(losses)


@torch.no_grad()
def batch_nll(model: LanguageModel, inputs: Tensor, targets: Tensor) -> float:
    """Mean nats per token of one batch of windows, inputs and targets (B, T) on the model's device,
    each window from a zero state: the study's validation estimator (one random batch)."""
    was_training = model.training
    model.eval()
    logits, _ = model(inputs)  # (B, T, V)
    model.train(was_training)
    return (_nats(logits, targets) / targets.numel()).item()


def windowed_nll(model: LanguageModel, tokens: Tensor, window: int, batch_windows: int | None = None) -> Score:
    """`windowed_total` read back as a Score."""
    return Score(nats=windowed_total(model, tokens, window, batch_windows).item(), tokens=tokens.numel() - 1)


def streamed_nll(model: LanguageModel, tokens: Tensor, chunk: int = 4096) -> Score:
    """`streamed_token_nll` summed (in float64) and read back as a Score."""
    return Score(nats=streamed_token_nll(model, tokens, chunk).double().sum().item(), tokens=tokens.numel() - 1)
