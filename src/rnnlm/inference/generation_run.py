"""Sample a checkpoint for every prompt, strategy and mode: the data of the generation report.

In:  a checkpoint, params `generate`, a seed.
Out: a `GenerationRun` (`rnnlm.inference.generation_record`: model, checkpoint identity, settings,
samples), saved as generations.json. Nothing in it changes from run to run, so the same checkpoint
and settings give the same bytes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from rnnlm.models.checkpoint import Checkpoint
from rnnlm.models.kinds import count_parameters
from rnnlm.params import GenerateParams, as_dict
from rnnlm.inference.decoding import Decoding
from rnnlm.inference.generation import MODES, generate, make_generator
from rnnlm.inference.generation_record import GenerationRun, Sample


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
