"""The generation report: the same checkpoint sampled stateless and stateful, side by side.

`run_generations` samples a checkpoint for every prompt, strategy and mode into a `GenerationRun`,
saved as `generations.json` (the data, for programs). `to_markdown` turns it and the evaluate
stage's metrics into `generations.md` (for people): the measures first, then for each prompt and
strategy an HTML table with the stateless and the stateful text next to each other, which GitHub
renders with the text's line breaks intact. Neither file holds a time or anything else that changes
from run to run, so the same checkpoint and settings give the same bytes.
"""

from __future__ import annotations

import hashlib
import html
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rnnlm.errors import RnnlmError
from rnnlm.checkpoint import Checkpoint
from rnnlm.model import count_parameters
from rnnlm.params import GenerateParams, as_dict
from rnnlm.sampling import MODES, Decoding, generate, make_generator


@dataclass(frozen=True)
class Sample:
    prompt: str
    strategy: str
    decoding: str
    mode: str
    text: str
    new_tokens: int


@dataclass
class GenerationRun:
    model: str
    checkpoint: dict[str, Any]
    settings: dict[str, Any]
    samples: list[Sample] = field(default_factory=list)

    def to_json(self) -> str:
        data = {**asdict(self), "samples": [asdict(s) for s in self.samples]}
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_json(cls, text: str) -> GenerationRun:
        raw = json.loads(text)
        raw["samples"] = [Sample(**s) for s in raw["samples"]]
        return cls(**raw)


def report_decodings(settings: GenerateParams) -> dict[str, Decoding]:
    """The strategies of the report, by name, with params' settings."""
    return {
        "greedy": Decoding("greedy"),
        "temperature": Decoding("temperature", temperature=settings.temperature),
        "top_k": Decoding("top_k", temperature=settings.top_k_temperature, top_k=settings.top_k),
        "top_p": Decoding("top_p", temperature=settings.top_p_temperature, top_p=settings.top_p),
    }


def run_generations(checkpoint: Checkpoint, checkpoint_path: str | Path, settings: GenerateParams, seed: int) -> GenerationRun:
    """Sample every prompt with every strategy in both modes, on the CPU, each from `seed`."""
    model = checkpoint.build_model("cpu")
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
                               generator=make_generator(seed))
                text = tokenizer.decode(prompt_ids + new[0].tolist())
                run.samples.append(Sample(prompt, strategy, decoding.describe(), mode, text, new.shape[1]))
    return run


def _cell(sample: Sample) -> str:
    # The prompt in bold, the model's continuation after it; <pre> keeps newlines and spaces.
    prompt, rest = sample.text[: len(sample.prompt)], sample.text[len(sample.prompt) :]
    return f"<td><pre><b>{html.escape(prompt, quote=False)}</b>{html.escape(rest, quote=False)}</pre></td>"


TEXT_STATISTICS = {
    "known_word_share": "words found in the training text",
    "distinct_1": "distinct words / words",
    "distinct_2": "distinct word pairs / pairs",
    "distinct_3": "distinct word triples / triples",
    "repeated_4gram_share": "word 4-grams repeating an earlier one",
    "char_loglik": "nats per character under the count 5-gram (higher: more corpus-like)",
    "speaker_line_share": "lines in the `NAME:` speaker form",
}


def _number(value: object, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def measures_markdown(metrics: dict[str, Any]) -> list[str]:
    """The evaluate stage's numbers as Markdown tables."""
    curve = metrics["reset_curve_bpc"]
    ngrams = metrics["ngram_bpc"]
    horizon = metrics["memory_horizon"]
    lines = [
        "",
        "## What statefulness is worth",
        "",
        f"Teacher-forced on the whole validation split ({metrics['val_chars']:,} characters, "
        f"{metrics['val_tokens']:,} predicted tokens), in bits per character (lower is better).",
        "",
        "| | bits per character |",
        "|---|---|",
        f"| stateful: the state is never reset | {_number(metrics['stateful_bpc'])} |",
        f"| stateless: the state is reset before every token | {_number(metrics['stateless_bpc'])} |",
        f"| bigram count model, the floor for one token of context | {_number(metrics['bigram_bpc'])} |",
    ]
    lines += [f"| {name} count model | {_number(bpc)} |" for name, bpc in ngrams.items() if name != "bigram"]
    lines += [
        "",
        f"Memory horizon: {'more than the largest k measured' if horizon is None else f'{horizon} tokens'} "
        "(the smallest reset interval within 1% of never resetting). "
        f"Stateless minus bigram: {_number(metrics['stateless_minus_bigram_bpc'])} bits per character.",
        "",
        "State reset every k tokens:",
        "",
        "| k | " + " | ".join(curve) + " |",
        "|---|" + "---|" * len(curve),
        "| bits per character | " + " | ".join(_number(v) for v in curve.values()) + " |",
        "",
        "Generated text, averaged over the samples below (the validation split, cut into pieces of the "
        "same length, for reference):",
        "",
        "| | stateless | stateful | validation text |",
        "|---|---|---|---|",
    ]
    text = metrics["text"]
    for key, words in TEXT_STATISTICS.items():
        lines.append(f"| {words} | " + " | ".join(_number(text[m].get(key)) for m in ("stateless", "stateful", "validation")) + " |")
    return lines


def to_markdown(run: GenerationRun, metrics: dict[str, Any] | None = None) -> str:
    """The report as GitHub-flavoured Markdown; with `metrics`, the measures come first."""
    ckpt, settings = run.checkpoint, run.settings
    lines = [
        f"# Generations: {run.model}",
        "",
        "The same checkpoint sampled in the two inference modes. **Stateless**: the state is reset to "
        "zero before every step and only the last token is fed, so the model sees one token of context. "
        "**Stateful**: the prompt is fed once, then the state is carried from step to step.",
        "",
        f"- checkpoint: `{ckpt['path']}` (sha256 `{ckpt['sha256'][:16]}`, {ckpt['steps']:,} training steps, "
        f"{ckpt['parameters']:,} parameters, {ckpt['tokens']} tokens)",
        f"- {settings['max_new_tokens']} new tokens per sample, seed {settings['seed']}; "
        "each strategy and mode starts from the same seed",
    ]
    if metrics is not None:
        lines += measures_markdown(metrics)
    prompts = list(dict.fromkeys(s.prompt for s in run.samples))
    for prompt in prompts:
        lines += ["", f"## Prompt `{prompt}`"]
        by_strategy: dict[str, dict[str, Sample]] = {}
        for s in run.samples:
            if s.prompt == prompt:
                by_strategy.setdefault(s.decoding, {})[s.mode] = s
        for decoding, modes in by_strategy.items():
            lines += [
                "",
                f"### {decoding}",
                "",
                "<table>",
                "<tr><th>stateless</th><th>stateful</th></tr>",
                "<tr>" + _cell(modes["stateless"]) + _cell(modes["stateful"]) + "</tr>",
                "</table>",
            ]
    return "\n".join(lines) + "\n"


def read_generations(path: str | Path) -> GenerationRun:
    """A `GenerationRun` saved by the generate stage."""
    try:
        return GenerationRun.from_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise RnnlmError(f"{path}: cannot read the generations ({error}); run the generate stage") from error
