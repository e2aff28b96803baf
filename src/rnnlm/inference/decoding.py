"""Generate text from a model in the two inference modes, with greedy, temperature, top-k or top-p.

Modes:
- `stateless`: before every step the state is reset to zero and only the last token is fed, so
  nothing before the last token can influence the next one (the study's "Method 1");
- `stateful`: the whole prompt is fed once, then one token at a time with the returned state
  passed back in (the study's "Method 2").

In:  a model, prompt ids, a `Decoding`, a mode, how many tokens and samples, a seeded generator.
Out: the new ids, (num_samples, max_new_tokens). Same seed, same ids on the CPU.

Where the "cpp" backend runs, a recurrent model's loop after the prompt runs in C++ (`generation.cpp`, through
`Stepper.compiled`); `generation_loop` and `pick` here are its reference and what CUDA runs. Both
draw the same numbers from the generator and give the same ids (tested). Their one difference, the
last bit of an `exp` (C++'s against PyTorch's vectorised one), could move a draw across a boundary
between two tokens with a probability of about 1e-16 per draw.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from rnnlm.errors import RnnlmError
from rnnlm.models.kinds import LanguageModel
from rnnlm.inference.stepping import Stepper, make_step
from rnnlm.models import state as states

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


def same_device(a: torch.device, b: torch.device) -> bool:
    """Whether a and b are one device ("cuda" without an index is the current GPU, as "cuda:0" may be)."""
    if a.type != b.type:
        return False
    current = torch.cuda.current_device() if a.type == "cuda" else None
    return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)


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
    if generator is not None and not same_device(generator.device, device):
        raise RnnlmError(f"the sampling generator is on {generator.device}, the model on {device}; "
                         f"expected one on the model's device (make_generator(seed, device))")
    prompt_ids = torch.tensor(prompt, dtype=torch.long, device=device).expand(num_samples, -1)  # (N, P)
    stateful = mode == "stateful"
    step = make_step(model)
    # Stateful: the whole prompt builds the state. Stateless: only the last token is ever seen.
    if stateful:
        logits, state = model(prompt_ids, None)
        logits = logits[:, -1]  # (N, V)
    else:
        logits, state = step(prompt_ids[:, -1], None)
    if isinstance(step, Stepper) and step.compiled is not None:
        # The same loop in C++ (generation.cpp): at batch 1 a character then costs the model's
        # products and little else. The same ids.
        return step.compiled.generate(logits, states.to_lists(state), stateful, max_new_tokens, decoding.strategy,
                                      decoding.temperature, decoding.top_k, decoding.top_p, generator, on_token)
    return generation_loop(step, logits, state, stateful=stateful, decoding=decoding, max_new_tokens=max_new_tokens,
                           generator=generator, on_token=on_token)


def generation_loop(step, logits: Tensor, state, *, stateful: bool, decoding: Decoding, max_new_tokens: int,
                    generator: torch.Generator | None, on_token: Callable[[Tensor], None] | None = None) -> Tensor:
    """From the prompt's logits (N, V) and state: pick a token, step (carrying the state if
    `stateful`), repeat -> the new ids (N, max_new_tokens)."""
    picked = []  # one (N,) tensor per step, stacked once at the end (cheaper than writing columns)
    for i in range(max_new_tokens):
        token = pick(logits, decoding, generator)  # (N,)
        picked.append(token)
        if on_token is not None:
            on_token(token)
        if i + 1 < max_new_tokens:
            logits, state = step(token, state if stateful else None)
    if not picked:
        return torch.empty(logits.shape[0], 0, dtype=torch.long, device=logits.device)
    return torch.stack(picked, dim=1)  # (N, max_new_tokens)
