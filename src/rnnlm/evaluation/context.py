"""How much context a model uses, measured on fixed targets (the method of Khandelwal et al., 2018,
"Sharp Nearby, Fuzzy Far Away: How Neural Language Models Use Context").

In:  a model, the validation ids, each predicted token's loss in the stateful pass (the state carried
     through the whole split: `scoring.streamed_token_nll`), the context lengths c, how many targets, a seed.
Out: a `ContextCurve`: for each c, the bits per character of the targets when each is predicted
     from exactly c preceding tokens starting from a zero state, with a paired standard error
     against the stateful pass on the same targets; and the horizon read off it.

Why not the reset curve: resetting every k tokens makes every window pay a warm-up (its first
tokens see almost no context), so its distance to never resetting shrinks like 1/k whatever the
model remembers. Here every target sees the same c tokens, so the curve reaches the stateful level
exactly where the model stops using more context (a fixed window of w tokens reaches it at c = w).

The targets are a seeded sample (without replacement) of the positions that have at least
max(c) tokens before them, so every c is measured on the same targets. For SentencePiece models c
counts pieces; the curve also gives the mean number of characters the c pieces span. Everything is
batched: all targets of one c go through the model as (targets, c) windows, tens of thousands of
tokens per batch on the CPU and more on CUDA (`batch_tokens_for`), the output layer only at each
window's last time step, and the losses stay on the device
until the curve is read once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from rnnlm.errors import RnnlmError
from rnnlm.models.kinds import LanguageModel
from rnnlm.evaluation.scoring import batch_tokens, full_precision


class ContextError(RnnlmError):
    """The split is too short for the context lengths asked for."""


@dataclass(frozen=True)
class ContextCurve:
    """Bits per character of the same targets for each context length c, and in the stateful pass."""

    lengths: list[int]
    bpc: list[float]  # per c: the targets' bits per character from exactly c tokens of context
    se_bpc: list[float]  # per c: the paired standard error of bpc[c] - stateful_bpc over targets
    mean_chars: list[float]  # per c: characters spanned by the c tokens of context, on average
    stateful_bpc: float  # the targets' bits per character with the state carried through the split
    targets: int
    tolerance: float

    def excess(self, i: int) -> float:
        """bpc[i] over the stateful level, relative."""
        return self.bpc[i] / self.stateful_bpc - 1

    def horizon(self, shift: float = 0.0) -> int | None:
        """The smallest c whose distance to the stateful level (relative, either side), moved by `shift`
        standard errors, is within the tolerance; None if no c is. shift = 0: the horizon; -2 and +2:
        the ends of its range."""
        for i, c in enumerate(self.lengths):
            if abs(self.excess(i)) + shift * self.se_bpc[i] / self.stateful_bpc <= self.tolerance:
                return c
        return None

    def as_metrics(self) -> dict[str, object]:
        """The stable keys of reports/metrics.json."""
        return {
            "context_targets": self.targets,
            "context_stateful_bpc": self.stateful_bpc,
            "context_curve_bpc": {str(c): v for c, v in zip(self.lengths, self.bpc)},
            "context_curve_se_bpc": {str(c): v for c, v in zip(self.lengths, self.se_bpc)},
            "context_curve_chars": {str(c): v for c, v in zip(self.lengths, self.mean_chars)},
            "context_horizon": self.horizon(),
            # the horizon if every c's excess were 2 standard errors lower, or higher
            "context_horizon_range": [self.horizon(-2.0), self.horizon(2.0)],
            "context_horizon_tolerance": self.tolerance,
        }


def target_positions(n_tokens: int, max_context: int, count: int, seed: int) -> Tensor:
    """Sorted positions t (predicting ids[t]) with at least `max_context` tokens before them: a
    seeded sample of `count` of them, or all if there are fewer."""
    candidates = n_tokens - max_context
    if candidates < 1:
        raise ContextError(f"the validation split has {n_tokens} tokens; a context of {max_context} needs at "
                           f"least {max_context + 1}")
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(candidates, generator=generator)[: min(count, candidates)]
    return chosen.sort().values + max_context


MIN_WINDOWS = 32
"""Windows per batch at least: fewer make the per-time-step products of the long windows too thin to
keep the matrix units busy; more make a wide model's batch of long windows too large for the caches
(benchmarks/context_cost.py measures both)."""


def batch_tokens_for(model: LanguageModel) -> int:
    """Tokens per batch of windows: on the CPU 2^24 / hidden (131,072 for a hidden size of 128, 16,384
    for 1,024), so that a batch's activations stay about the same size whatever the model's width; on
    CUDA as many as `scoring.batch_tokens` allows."""
    hidden = model.config.hidden
    return batch_tokens(next(model.parameters()).device, hidden, max(1, 2**24 // hidden))


@torch.no_grad()
def context_nll(model: LanguageModel, ids: Tensor, positions: Tensor, c: int, batch_tokens: int | None = None) -> Tensor:
    """Each target ids[t]'s loss in nats given exactly ids[t-c:t], from a zero state: (N,) on the
    model's device (float32 at least). ids and positions are CPU int64 tensors; the windows go
    through the model `batch_tokens` tokens at a time (default `batch_tokens_for(model)`), at least
    MIN_WINDOWS windows at a time. How they are batched changes no loss beyond summation order."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    offsets = torch.arange(-c, 0)
    losses = []
    per_batch = max(MIN_WINDOWS, (batch_tokens or batch_tokens_for(model)) // c)
    for start in range(0, positions.numel(), per_batch):  # windows a batch
        t = positions[start : start + per_batch]
        windows = ids[t[:, None] + offsets].to(device)  # (b, c)
        logits, _ = model(windows, last_only=True)  # (b, 1, V)
        losses.append(F.cross_entropy(full_precision(logits[:, 0]), ids[t].to(device), reduction="none"))
    model.train(was_training)
    return torch.cat(losses)


def context_curve(model: LanguageModel, ids: Tensor, stateful_nll: Tensor, token_chars: Tensor, lengths: list[int],
                  targets: int, seed: int, tolerance: float) -> ContextCurve:
    """The curve for `lengths` on `targets` seeded targets of `ids` (CPU int64). Lengths that leave no
    target in a split this short are left out (the curve's `lengths` says which were measured); a
    ContextError if none is left.

    stateful_nll (len(ids) - 1,): each token's loss in the stateful pass, position t - 1 for ids[t];
    token_chars (V,): the characters each token id stands for.
    """
    lengths = sorted({c for c in lengths if c < ids.numel()}) or sorted(set(lengths))[:1]
    positions = target_positions(ids.numel(), lengths[-1], targets, seed)
    per_c = torch.stack([context_nll(model, ids, positions, c) for c in lengths]).double()  # (C, N)
    stateful = stateful_nll[positions - 1].double()  # (N,), paired with per_c's columns
    n = positions.numel()
    # The standard error of a sum of n paired differences: sqrt(n) times their standard deviation.
    se_nats = (per_c - stateful).std(dim=1, correction=1) * math.sqrt(n) if n > 1 else torch.zeros_like(per_c[:, 0])
    nats = torch.cat([per_c.sum(1), se_nats, stateful.sum()[None]]).tolist()  # the one read from the device
    total_chars = float(token_chars[ids[positions]].sum())
    spans = [float(token_chars[ids[positions[:, None] + torch.arange(-c, 0)]].sum(1).double().mean()) for c in lengths]
    bits = 1 / (total_chars * math.log(2))
    C = len(lengths)
    return ContextCurve(lengths=lengths, bpc=[v * bits for v in nats[:C]], se_bpc=[v * bits for v in nats[C : 2 * C]],
                        mean_chars=spans, stateful_bpc=nats[-1] * bits, targets=n, tolerance=tolerance)
