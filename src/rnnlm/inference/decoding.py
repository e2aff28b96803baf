"""How the next token is picked from a model's logits: greedy, temperature, top-k or top-p.

In:  logits (B, V), a `Decoding`, a seeded generator.
Out: the next ids (B,). Same seed, same ids on the CPU.

`pick` is the reference of the same choice in C++ (`compute/cpp/generation.cpp`), which draws the
same numbers from the generator and gives the same ids (tested). Their one difference, the last
bit of an `exp` (C++'s against PyTorch's vectorised one), could move a draw across a boundary
between two tokens with a probability of about 1e-16 per draw. The two inference modes and the loop
that alternates an advance and a pick are `rnnlm.inference.generation`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from rnnlm.errors import RnnlmError

STRATEGIES = ("greedy", "temperature", "top_k", "top_p")


class SamplingError(RnnlmError):
    """Sampling settings or a prompt that cannot be used."""


@dataclass(frozen=True)
class Decoding:
    """How the next token is picked from the logits.

    greedy: the most likely token. temperature: sample from softmax(logits / temperature).
    top_k: sample among the k most likely, at `temperature`. top_p: sample among the smallest set
    of most likely tokens whose probability reaches p, at `temperature`.
    """

    strategy: str
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def validate(self, vocab_size: int) -> None:
        if self.strategy not in STRATEGIES:
            raise SamplingError(f"strategy {self.strategy!r}: expected one of {', '.join(STRATEGIES)}")
        if not 0 < self.temperature < math.inf:
            raise SamplingError(f"temperature {self.temperature}: expected a finite positive number")
        if self.strategy == "top_k" and not 1 <= self.top_k <= vocab_size:
            raise SamplingError(f"top-k {self.top_k}: expected an integer from 1 to the vocabulary size {vocab_size}")
        if self.strategy == "top_p" and not 0 < self.top_p <= 1:
            raise SamplingError(f"top-p {self.top_p}: expected a number in (0, 1]")

    def describe(self) -> str:
        if self.strategy == "greedy":
            return "greedy"
        if self.strategy == "temperature":
            return f"temperature {self.temperature}"
        if self.strategy == "top_k":
            return f"top-k {self.top_k} at temperature {self.temperature}"
        return f"top-p {self.top_p} at temperature {self.temperature}"


def pick(logits: Tensor, decoding: Decoding, generator: torch.Generator | None) -> Tensor:
    """Next ids (B,) from logits (B, V): the most likely (greedy, the lower id on a tie), or one draw
    per row from `candidate_weights`: one uniform u per row (float64), and the first token whose
    cumulative weight exceeds u times the total. `generation.cpp` has the same in C++, drawing the
    same numbers from the generator."""
    if decoding.strategy == "greedy":
        return logits.argmax(dim=-1)
    cumulative = candidate_weights(logits, decoding).cumsum(-1)  # (B, V)
    total = cumulative[:, -1:]  # (B, 1)
    u = torch.rand(total.shape, dtype=torch.float64, device=logits.device, generator=generator)  # (B, 1)
    drawn = (cumulative <= u * total).sum(-1)  # (B,)
    last = (cumulative < total).sum(-1)  # the last token with weight, which u * total could round up to
    return torch.minimum(drawn, last)


def candidate_weights(logits: Tensor, decoding: Decoding) -> Tensor:
    """logits (B, V) -> float64 weights (B, V) proportional to the probabilities of the next token,
    zero outside the candidates: exp(logits / T - max) for temperature sampling; for top-k and top-p
    the tokens ranked by weight (a tie ranks the lower id first) and only the k first, or the first
    ones whose weight before them stays below p of the total, kept."""
    scaled = logits.double() / decoding.temperature  # (B, V)
    weights = (scaled - scaled.amax(-1, keepdim=True)).exp()
    if decoding.strategy not in ("top_k", "top_p"):
        return weights
    ranked, order = weights.sort(dim=-1, descending=True, stable=True)  # (B, V)
    if decoding.strategy == "top_k":
        keep = torch.arange(ranked.shape[-1], device=ranked.device) < decoding.top_k  # (V,)
    else:
        cumulative = ranked.cumsum(-1)
        before = F.pad(cumulative[:, :-1], (1, 0))  # (B, V): the weight ranked above each token
        keep = before < decoding.top_p * cumulative[:, -1:]
    return torch.zeros_like(weights).scatter_(-1, order, ranked * keep)
