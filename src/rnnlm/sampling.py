"""Generate text from a model in the two inference modes, with greedy, temperature, top-k or top-p.

Modes:
- `stateless`: before every step the state is reset to zero and only the last token is fed, so
  nothing before the last token can influence the next one (the study's "Method 1");
- `stateful`: the whole prompt is fed once, then one token at a time with the returned state
  passed back in (the study's "Method 2").

In:  a model, prompt ids, a `Decoding`, a mode, how many tokens and samples, a seeded generator.
Out: the new ids, (num_samples, max_new_tokens). Same seed, same ids on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from rnnlm.errors import RnnlmError
from rnnlm.model import LanguageModel
from rnnlm.stepping import make_step

MODES = ("stateless", "stateful")
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
        if not self.temperature > 0:
            raise SamplingError(f"temperature {self.temperature}: expected a positive number")
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
    """Next ids (B,) from logits (B, V)."""
    if decoding.strategy == "greedy":
        return logits.argmax(dim=-1)
    scaled = logits.float() / decoding.temperature  # (B, V)
    if decoding.strategy == "top_k":
        values, indices = scaled.topk(decoding.top_k, dim=-1)  # (B, k)
        choice = torch.multinomial(values.softmax(-1), 1, generator=generator)  # (B, 1)
        return indices.gather(-1, choice).squeeze(-1)
    if decoding.strategy == "top_p":
        probs, indices = scaled.softmax(-1).sort(dim=-1, descending=True)  # (B, V)
        before = probs.cumsum(-1) - probs  # probability of the tokens ranked above each one
        probs = probs.masked_fill(before >= decoding.top_p, 0.0)  # the top token always stays
        choice = torch.multinomial(probs, 1, generator=generator)
        return indices.gather(-1, choice).squeeze(-1)
    return torch.multinomial(scaled.softmax(-1), 1, generator=generator).squeeze(-1)


def check_request(prompt: list[int], mode: str, max_new_tokens: int, num_samples: int) -> None:
    """A SamplingError for an empty prompt, an unknown mode, or a negative length or count."""
    if mode not in MODES:
        raise SamplingError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    if not prompt:
        raise SamplingError("the prompt is empty; expected at least one token to start from")
    if max_new_tokens < 0:
        raise SamplingError(f"max new tokens {max_new_tokens}: expected a non-negative integer")
    if num_samples < 1:
        raise SamplingError(f"number of samples {num_samples}: expected a positive integer")


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator on `device` seeded with `seed` (sampling on CUDA needs a CUDA generator)."""
    return torch.Generator(device=device).manual_seed(seed)


@torch.inference_mode()
def generate(
    model: LanguageModel,
    prompt: list[int],
    *,
    mode: str,
    decoding: Decoding,
    max_new_tokens: int,
    num_samples: int = 1,
    generator: torch.Generator | None = None,
    on_token: Callable[[Tensor], None] | None = None,
) -> Tensor:
    """`num_samples` continuations of `prompt`, (num_samples, max_new_tokens); see the module doc.

    `on_token` is called with each step's new ids (num_samples,) as soon as they are picked.
    """
    check_request(prompt, mode, max_new_tokens, num_samples)
    decoding.validate(model.config.vocab_size)
    model.eval()
    device = next(model.parameters()).device
    prompt_ids = torch.tensor(prompt, dtype=torch.long, device=device).expand(num_samples, -1)  # (N, P)
    stateful = mode == "stateful"
    step = make_step(model)
    # Stateful: the whole prompt builds the state. Stateless: only the last token is ever seen.
    if stateful:
        logits, state = model(prompt_ids, None)
        logits = logits[:, -1]  # (N, V)
    else:
        logits, state = step(prompt_ids[:, -1], None)
    picked = []  # one (N,) tensor per step, stacked once at the end (cheaper than writing columns)
    for i in range(max_new_tokens):
        token = pick(logits, decoding, generator)  # (N,)
        picked.append(token)
        if on_token is not None:
            on_token(token)
        if i + 1 < max_new_tokens:
            logits, state = step(token, state if stateful else None)
    if not picked:
        return torch.empty(num_samples, 0, dtype=torch.long, device=device)
    return torch.stack(picked, dim=1)  # (N, max_new_tokens)
