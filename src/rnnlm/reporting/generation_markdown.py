"""The generation report: the same checkpoint sampled stateless and stateful, side by side.

In:  a `GenerationRun` (rnnlm.inference.generation) and the evaluate stage's metrics.
Out: `generations.md` for people: the measures first, then for each prompt and strategy an HTML
table with the stateless and the stateful text next to each other, which GitHub renders with the
text's line breaks intact.
"""

from __future__ import annotations

import html
from typing import Any

from rnnlm.inference.generation_record import GenerationRun, Sample


def _cell(sample: Sample) -> str:
    # The prompt in bold, the model's continuation after it; <pre> keeps newlines and spaces.
    prompt, rest = sample.text[: len(sample.prompt)], sample.text[len(sample.prompt) :]
    return f"<td><pre><b>{html.escape(prompt, quote=False)}</b>{html.escape(rest, quote=False)}</pre></td>"


def text_statistics_labels(ngram_names: list[str]) -> dict[str, str]:
    """The rows of the generated-text table. `ngram_names`: metrics.json's n-gram models, lowest order
    first; the text is scored under the highest (`evaluate.ngram_max_order`)."""
    top = ngram_names[-1]
    scorer = top.replace("gram", "-gram") if top[0].isdigit() else top  # "5gram" -> "5-gram", "trigram"
    return {
        "known_word_share": "words found in the training text",
        "distinct_1": "distinct words / words",
        "distinct_2": "distinct word pairs / pairs",
        "distinct_3": "distinct word triples / triples",
        "repeated_4gram_share": "word 4-grams repeating an earlier one",
        "char_loglik": f"nats per character under the count {scorer} (higher: more corpus-like)",
        "speaker_line_share": "lines in the `NAME:` speaker form",
    }


def _number(value: object, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _tokens(c: int | None) -> str:
    return "more than the largest c measured" if c is None else f"{c} tokens"


def measures_markdown(metrics: dict[str, Any]) -> list[str]:
    """The evaluate stage's numbers (`metrics`, as metrics.json holds them) as Markdown: the scores of
    both modes beside the count models, the context curve, the reset curve and the text statistics."""
    return ["", "## What statefulness is worth", "", *_scores(metrics), "", *_context(metrics), "",
            *_resets(metrics), "", *_text(metrics)]


def _scores(metrics: dict[str, Any]) -> list[str]:
    """Both modes' bits per character on the validation split beside the count models' (and epoch 1's
    weights' where the checkpoint kept them), then stateless minus bigram."""
    lines = [
        f"Teacher-forced on the whole validation split ({metrics['val_chars']:,} characters, "
        f"{metrics['val_tokens']:,} predicted tokens), in bits per character (lower is better).",
        "",
        "| | bits per character |",
        "|---|---|",
        f"| stateful: the state is never reset | {_number(metrics['stateful_bpc'])} |",
        f"| stateless: the state is reset before every token | {_number(metrics['stateless_bpc'])} |",
        f"| bigram count model, the floor for one token of context | {_number(metrics['bigram_bpc'])} |",
    ]
    lines += [f"| {name} count model | {_number(bpc)} |" for name, bpc in metrics["ngram_bpc"].items()
              if name != "bigram"]
    first = metrics.get("first_epoch")  # absent from checkpoints that did not keep epoch 1's weights
    if first:
        lines += [f"| after epoch 1 only, stateful | {_number(first['stateful_bpc'])} |",
                  f"| after epoch 1 only, stateless | {_number(first['stateless_bpc'])} |"]
    return [*lines, "", f"Stateless minus bigram: {_number(metrics['stateless_minus_bigram_bpc'])} bits per character."]


def _context(metrics: dict[str, Any]) -> list[str]:
    """The context curve: fixed targets predicted from c tokens of context, against the stateful pass,
    and the horizon read from it."""
    context = {int(c): v for c, v in metrics["context_curve_bpc"].items()}
    stateful = metrics["context_stateful_bpc"]
    horizon, (low, high) = metrics["context_horizon"], metrics["context_horizon_range"]
    return [
        f"How much context the model uses: {metrics['context_targets']:,} validation targets, each predicted "
        f"from exactly c preceding tokens (a zero state before them), against the same targets with the state "
        f"carried through the split ({_number(stateful)} bits per character). Context "
        f"horizon, the smallest c within {metrics['context_horizon_tolerance']:.0%} of the stateful pass: "
        f"{_tokens(horizon)} (from {_tokens(low)} to {_tokens(high)} within two standard errors).",
        "",
        "| c (tokens of context) | " + " | ".join(str(c) for c in context) + " |",
        "|---|" + "---|" * len(context),
        "| bits per character | " + " | ".join(_number(v) for v in context.values()) + " |",
        "| over the stateful pass | " + " | ".join(f"{v / stateful - 1:+.1%}" for v in context.values()) + " |",
        "| standard error | " + " | ".join(_number(v, 4) for v in metrics["context_curve_se_bpc"].values()) + " |",
        "| characters spanned | " + " | ".join(f"{v:.1f}" for v in metrics["context_curve_chars"].values()) + " |",
    ]


def _resets(metrics: dict[str, Any]) -> list[str]:
    """The reset curve: bits per character with the state reset every k tokens."""
    curve = metrics["reset_curve_bpc"]
    return [
        "State reset every k tokens (what resetting costs: every window pays a warm-up, so this curve "
        "nears the never-reset level like 1/k whatever the model remembers):",
        "",
        "| k | " + " | ".join(curve) + " |",
        "|---|" + "---|" * len(curve),
        "| bits per character | " + " | ".join(_number(v) for v in curve.values()) + " |",
    ]


def _text(metrics: dict[str, Any]) -> list[str]:
    """The text statistics of the samples in each mode beside the validation text's."""
    text = metrics["text"]
    lines = [
        "Generated text, averaged over the samples below (the validation split, cut into pieces of the "
        "same length, for reference):",
        "",
        "| | stateless | stateful | validation text |",
        "|---|---|---|---|",
    ]
    for key, words in text_statistics_labels(list(metrics["ngram_bpc"])).items():
        lines.append(f"| {words} | "
                     + " | ".join(_number(text[m].get(key)) for m in ("stateless", "stateful", "validation")) + " |")
    return lines


def to_markdown(run: GenerationRun, metrics: dict[str, Any] | None = None) -> str:
    """The report as GitHub-flavoured Markdown; with `metrics`, the measures come first."""
    ckpt, settings = run.checkpoint, run.settings
    lines = [
        f"# Generations: {run.model}",
        "",
        "The same checkpoint sampled in the two inference modes. **Stateless**: the state is reset to "
        "zero before every token and only the last token is fed, so the model sees one token of context. "
        "**Stateful**: the prompt is fed once, then the state is carried from token to token.",
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
