"""Generate text from a model in the two inference modes, one token at a time.

Modes:
- `stateless`: before every token the state is reset to zero and only the last token is fed, so
  nothing before the last token can influence the next one (the study's "Method 1");
- `stateful`: the whole prompt is fed once, then one token at a time with the returned state
  passed back in (the study's "Method 2").

In:  a model, prompt ids, a `Decoding` (`rnnlm.inference.decoding`: how each token is picked), a
     mode, how many tokens and samples, a seeded generator.
Out: the new ids, (num_samples, max_new_tokens). Same seed, same ids on the CPU.

Where the "cpp" backend runs, a recurrent model's loop after the prompt runs in C++ (`generation.cpp`,
through `Advancer.compiled`); `generation_loop` here is its reference and what CUDA runs: the same
ids (tested).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from rnnlm.errors import RnnlmError
from rnnlm.inference.decoding import Decoding, SamplingError, pick
from rnnlm.inference.advancing import Advancer, make_advancer
from rnnlm.models.cells.base import to_lists
from rnnlm.models.kinds import LanguageModel

MODES = ("stateless", "stateful")


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

    `on_token` is called with each token's new ids (num_samples,) as soon as they are picked.
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
    advance = make_advancer(model)
    # Stateful: the whole prompt builds the state. Stateless: only the last token is ever seen.
    if stateful:
        logits, state = model(prompt_ids, None)
        logits = logits[:, -1]  # (N, V)
    else:
        logits, state = advance(prompt_ids[:, -1], None)
    if isinstance(advance, Advancer) and advance.compiled is not None:
        # The same loop in C++ (generation.cpp): at batch 1 a character then costs the model's
        # products and little else. The same ids.
        return advance.compiled.generate(logits, to_lists(state), stateful, max_new_tokens, decoding.strategy,
                                      decoding.temperature, decoding.top_k, decoding.top_p, generator, on_token)
    return generation_loop(advance, logits, state, stateful=stateful, decoding=decoding, max_new_tokens=max_new_tokens,
                           generator=generator, on_token=on_token)


def generation_loop(advance, logits: Tensor, state, *, stateful: bool, decoding: Decoding, max_new_tokens: int,
                    generator: torch.Generator | None, on_token: Callable[[Tensor], None] | None = None) -> Tensor:
    """From the prompt's logits (N, V) and state: pick a token, advance (carrying the state if
    `stateful`), repeat -> the new ids (N, max_new_tokens)."""
    picked = []  # one (N,) tensor per token, stacked once at the end (cheaper than writing columns)
    for i in range(max_new_tokens):
        token = pick(logits, decoding, generator)  # (N,)
        picked.append(token)
        if on_token is not None:
            on_token(token)
        if i + 1 < max_new_tokens:
            logits, state = advance(token, state if stateful else None)
    if not picked:
        return torch.empty(logits.shape[0], 0, dtype=torch.long, device=logits.device)
    return torch.stack(picked, dim=1)  # (N, max_new_tokens)
