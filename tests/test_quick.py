"""A quick run (train.steps_scale below 1) measures on a part of the validation text in proportion;
a full-scale run measures exactly as before."""

from __future__ import annotations

import dataclasses

from rnnlm.scale import (MIN_NEW_TOKENS, MIN_TARGETS, MIN_VALIDATION_CHARS, evaluate_settings,
                         generate_settings, validation_text)
from rnnlm.params import parse_params


def test_full_scale_measures_everything(raw_params):
    settings = parse_params(raw_params).evaluate
    text = "x" * 111_539
    sampling = parse_params(raw_params).generate
    for scale in (1.0, 2.0):
        assert validation_text(text, scale) is text and evaluate_settings(settings, scale) is settings
        assert generate_settings(sampling, scale) is sampling


def test_a_quick_run_measures_its_share_and_never_too_little(raw_params):
    settings = parse_params(raw_params).evaluate
    text = "".join(chr(65 + i % 26) for i in range(111_539))
    assert validation_text(text, 0.1) == text[:11_154]  # the first tenth, rounded up
    assert validation_text(text, 0.01) == text[:1116]
    assert validation_text(text, 0.005) == text[:MIN_VALIDATION_CHARS]  # 558 would be too few
    assert validation_text(text, 0.02) == text[:2231]
    assert validation_text(text[:1000], 0.001) == text[:1000]  # never more than there is
    assert evaluate_settings(settings, 0.1).context_targets == round(0.1 * settings.context_targets)
    assert evaluate_settings(settings, 0.01).context_targets == MIN_TARGETS
    few = dataclasses.replace(settings, context_targets=20)
    assert evaluate_settings(few, 0.01).context_targets == 20  # never more than the full run's
    quick = evaluate_settings(settings, 0.01)
    assert dataclasses.replace(quick, context_targets=settings.context_targets,
                               context_lengths=settings.context_lengths) == settings


def test_a_quick_context_curve_does_its_share_of_the_work(raw_params):
    """Targets times the summed lengths within s of the full curve's, the longest lengths left out first."""
    settings = parse_params(raw_params).evaluate
    assert settings.context_targets == 2000 and settings.context_lengths == tuple(2**i for i in range(11))
    quick = evaluate_settings(settings, 0.01)  # 50 x (1 + ... + 256) = 25,550 <= 20 x 2,047 = 40,940
    assert (quick.context_targets, quick.context_lengths) == (50, (1, 2, 4, 8, 16, 32, 64, 128, 256))
    assert evaluate_settings(settings, 0.1).context_lengths == settings.context_lengths  # 200 targets: all of it
    few = evaluate_settings(dataclasses.replace(settings, context_targets=20), 0.01)  # 20 targets, 409 window tokens
    assert (few.context_targets, few.context_lengths) == (20, (1, 2, 4, 8))
    long_only = dataclasses.replace(settings, context_lengths=(1024, 512))
    assert evaluate_settings(long_only, 0.01).context_lengths == (512,)
    assert evaluate_settings(long_only, 0.001).context_lengths == (512,)  # the shortest is always kept


def test_a_quick_runs_samples_are_shorter_in_proportion(raw_params):
    sampling = parse_params(raw_params).generate
    assert sampling.max_new_tokens == 200
    assert generate_settings(sampling, 0.01).max_new_tokens == MIN_NEW_TOKENS == 32  # 2 would be too few
    assert generate_settings(sampling, 0.5).max_new_tokens == 100
    short = dataclasses.replace(sampling, max_new_tokens=10)
    assert generate_settings(short, 0.01).max_new_tokens == 10  # never longer than the full run's
    assert dataclasses.replace(generate_settings(sampling, 0.01), max_new_tokens=200) == sampling
