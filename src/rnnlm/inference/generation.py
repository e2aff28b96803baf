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
ids (tested). For one stateless sample the C++ loop computes the logits after each token once and
looks them up after (they depend on that token alone): at most one advance per token of the
vocabulary, the same ids.

The generate stage's samples, `run_generations`: every prompt of params `generate` with every
strategy of the report (`report_decodings`) in both modes, each from the same seed, as a
`GenerationRun` (`rnnlm.inference.generation_record`: model, checkpoint identity, settings,
samples), saved as generations.json. Nothing in it changes from run to run, so the same checkpoint
and settings give the same bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from rnnlm.errors import RnnlmError
from rnnlm.inference.decoding import Decoding, SamplingError, pick
from rnnlm.inference.advancing import Advancer, make_advancer
from rnnlm.inference.generation_record import GenerationRun, Sample
from rnnlm.models.cells.base import to_lists
from rnnlm.models.checkpoint import Checkpoint
from rnnlm.models.kinds import LanguageModel, count_parameters
from rnnlm.params import GenerateParams, as_dict

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


def report_decodings(settings: GenerateParams) -> dict[str, Decoding]:
    """The strategies of the report, by name, with params' settings."""
    return {
        "greedy": Decoding("greedy"),
        "temperature": Decoding("temperature", temperature=settings.temperature),
        "top_k": Decoding("top_k", temperature=settings.top_k_temperature, top_k=settings.top_k),
        "top_p": Decoding("top_p", temperature=settings.top_p_temperature, top_p=settings.top_p),
    }


def run_generations(checkpoint: Checkpoint, checkpoint_path: str | Path, settings: GenerateParams, seed: int,
                    device: str | torch.device = "cpu") -> GenerationRun:
    """Sample every prompt with every strategy in both modes, on `device`, each from `seed` (a
    generator on that device: CUDA draws other numbers than the CPU from the same seed)."""
    model = checkpoint.build_model(device)
    tokenizer = checkpoint.tokenizer()
    run = GenerationRun(
        model=checkpoint.model_name,
        checkpoint={
            "path": str(checkpoint_path),
            "sha256": hashlib.sha256(Path(checkpoint_path).read_bytes()).hexdigest(),
            "steps": checkpoint.step,
            "parameters": count_parameters(model),
            "tokens": tokenizer.kind,
        },
        settings={**as_dict(settings), "seed": seed},
    )
    for prompt in settings.prompts:
        prompt_ids = tokenizer.encode(prompt)
        for strategy, decoding in report_decodings(settings).items():
            for mode in MODES:
                new = generate(model, prompt_ids, mode=mode, decoding=decoding, max_new_tokens=settings.max_new_tokens,
                               generator=make_generator(seed, device))
                text = tokenizer.decode(prompt_ids + new[0].tolist())
                run.samples.append(Sample(prompt, strategy, decoding.describe(), mode, text, new.shape[1]))
    return run
