"""A run's scale, `train.steps_scale`: full (1 and above) or quick, and the one rule for what a quick
run does in proportion, read by training, generation and evaluation alike.

In:  `train.steps_scale`, and the validation text, the generate settings or the evaluate settings.
Out: whether the run is quick, and what it measures on. At full scale (steps_scale ≥ 1) everything
is unchanged. Below it, with s = steps_scale:

- the validation text (per-epoch validation in training, and every measure of the evaluate stage)
  is its first s-th part, never less than `MIN_VALIDATION_CHARS` characters (nor more than the whole),
  and the study's random validation batch holds at most that text's whole windows (8 of the 64 at
  s = 0.01, 128 tokens a window: `rnnlm.training.parts`);
- training saves its resume file every `save_every_s`, not after every epoch (`rnnlm.training.record`
  asks `quick`);
- the context curve scores s of `evaluate.context_targets` targets, never fewer than `MIN_TARGETS`,
  at the lengths that keep its work (targets times the summed lengths) within s of the full curve's,
  the longest left out first and the shortest always kept (at s = 0.01 with the params' 2,000
  targets and lengths 1 to 1,024: 50 targets at lengths 1 to 256); lengths beyond the shorter text
  are left out too, as for any short text;
- each sample is s of `generate.max_new_tokens` long, never shorter than `MIN_NEW_TOKENS`.

So every part of a quick run does about s of its full-scale work, as its training does. A quick run
(`dvc exp run -S train.steps_scale=0.01`) is a smoke test of the whole pipeline at the cost of its
training, not a measurement: its figures come from a fraction of the validation text, it is
collected apart (reports/study/quick/) and never enters the study.
"""

from __future__ import annotations

import dataclasses
import math

from rnnlm.params import EvaluateParams, GenerateParams

MIN_VALIDATION_CHARS = 1024
"""At least 8 windows of 128 characters: a loss that is not all noise, at a cost a quick run can pay
(the first 1% of Tiny Shakespeare's validation split is 1,116 characters)."""

MIN_TARGETS = 50
"""At least this many context targets: each point of the curve still moves."""

MIN_NEW_TOKENS = 32
"""At least this many new tokens a sample: a line of a play for a character model, words enough for
each text statistic."""


def quick(steps_scale: float) -> bool:
    """Whether a run at `steps_scale` is a quick one (below full scale)."""
    return steps_scale < 1


def validation_text(val_text: str, steps_scale: float) -> str:
    """The validation text a run at `steps_scale` measures on (the whole at full scale)."""
    if not quick(steps_scale):
        return val_text
    return val_text[: max(MIN_VALIDATION_CHARS, math.ceil(steps_scale * len(val_text)))]


def evaluate_settings(settings: EvaluateParams, steps_scale: float) -> EvaluateParams:
    """The evaluate settings of a run at `steps_scale` (the same at full scale)."""
    if not quick(steps_scale):
        return settings
    targets = min(settings.context_targets, max(MIN_TARGETS, round(steps_scale * settings.context_targets)))
    lengths = sorted(set(settings.context_lengths))
    work = steps_scale * settings.context_targets * sum(lengths)  # s of the full curve's work, in window tokens
    kept = [c for i, c in enumerate(lengths) if i == 0 or targets * sum(lengths[: i + 1]) <= work]
    return dataclasses.replace(settings, context_targets=targets, context_lengths=tuple(kept))


def generate_settings(settings: GenerateParams, steps_scale: float) -> GenerateParams:
    """The generate settings of a run at `steps_scale` (the same at full scale)."""
    if not quick(steps_scale):
        return settings
    tokens = min(settings.max_new_tokens, max(MIN_NEW_TOKENS, round(steps_scale * settings.max_new_tokens)))
    return dataclasses.replace(settings, max_new_tokens=tokens)
