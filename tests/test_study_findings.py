"""The study's claims judged against the spread over seeds: every rule (sign, band, tolerance, best
epoch) on synthetic runs of known spread, a difference inside the noise inconclusive, a clear one
supported or contradicted, both ways; and the interval arithmetic itself against its formulas."""

from __future__ import annotations

import math
import statistics
import warnings

import pandas as pd
import pytest
from scipy import stats

from rnnlm.study import findings as sf
from rnnlm.study import stats as st
from rnnlm.study.table import FIGURES

OFFSETS = (-1.2, -0.5, 0.0, 0.5, 1.2)  # five seeds' deviations from the mean, in units of the spread
SHAPES = {"alpha": ("gru", 64, 128, 1), "beta": ("gru", 128, 256, 2), "gamma": ("gru", 256, 512, 3)}


def seeds(mean: float, spread: float, n: int = 5) -> list[float]:
    return [mean + spread * z for z in OFFSETS[:n]]


def frame_of(models: dict[str, dict[str, list[float]]], tokens: dict[str, str] | None = None,
             cells: dict[str, str] | None = None) -> pd.DataFrame:
    """A table of runs as `runs_frame` gives it: per model, each figure's value per seed (figures not
    given: a plausible constant)."""
    rows = []
    for i, (model, figures) in enumerate(models.items()):
        n = len(next(iter(figures.values())))
        for k in range(n):
            row = {name: 1.0 for name in FIGURES}
            row.update({"parameters": 10.0 ** (i + 3), "steps": 2000.0, "epochs": 10.0, "bigram_bpc": 3.6,
                        "stateless_minus_bigram_bpc": 0.1, "log2_context_horizon": 3.0, "context_horizon": 8.0})
            row.update({name: values[k] for name, values in figures.items()})
            rows.append({"model": model, "seed": k + 1, "tokens": (tokens or {}).get(model, "char"),
                         "cell": (cells or {}).get(model, "gru"), "machine": "cpu: Test", "gemm": "mkl",
                         "source": "test", **row})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# The intervals and the rules


def test_the_t_interval_is_students():
    values = seeds(2.0, 0.01)
    interval = st.t_interval(values)
    half = stats.t.ppf(0.975, 4) * statistics.stdev(values) / math.sqrt(5)
    assert interval.estimate == pytest.approx(2.0) and interval.half_width == pytest.approx(half)
    assert interval.n == 5 and not interval.one_run


def test_welch_and_paired_intervals_follow_their_formulas():
    a, b = seeds(1.5, 0.02), seeds(1.4, 0.01, n=4)
    va, vb = statistics.variance(a) / 5, statistics.variance(b) / 4
    df = (va + vb) ** 2 / (va ** 2 / 4 + vb ** 2 / 3)
    interval = st.welch(a, b)
    assert interval.estimate == pytest.approx(statistics.fmean(a) - statistics.fmean(b)) and interval.n == 4
    assert interval.half_width == pytest.approx(stats.t.ppf(0.975, df) * math.sqrt(va + vb))
    before, after = [1.0, 2.0, 3.0], [0.9, 1.8, 2.95]
    assert st.paired(before, after).estimate == pytest.approx(statistics.fmean([0.1, 0.2, 0.05]))
    assert st.paired(before, after).half_width < st.welch(before, after).half_width  # pairing removes the runs' spread


def test_welch_against_a_model_without_spread_is_the_other_models_t_interval_shifted():
    varied, constant = seeds(4.0, 0.5), [3.0, 3.0, 3.0, 3.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy warns on a zero variance; ours must not reach it
        both_ways = st.welch(varied, constant), st.welch(constant, varied)
    half = stats.t.ppf(0.975, 4) * statistics.stdev(varied) / math.sqrt(5)  # Welch's df: n - 1 of the varied side
    for interval, estimate in zip(both_ways, (1.0, -1.0)):
        assert interval.estimate == pytest.approx(estimate) and interval.n == 4
        assert interval.half_width == pytest.approx(half)
        assert (interval.low + interval.high) / 2 == pytest.approx(estimate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scipy_bounds = stats.ttest_ind(varied, constant, equal_var=False).confidence_interval(0.95)
    assert (both_ways[0].low, both_ways[0].high) == pytest.approx(tuple(scipy_bounds))


def test_one_run_has_no_interval_and_decides_nothing():
    one = st.t_interval([1.3])
    assert one.one_run and one.half_width == 0
    assert st.sign_verdict(one) == st.band_verdict(one, -1, 1) == "inconclusive at n = 1"
    assert st.welch([1.0], seeds(0.5, 0.01)).n == 1
    assert st.t_interval([2.0, 2.0, 2.0]).half_width == 0  # no spread at all: the value, decided


@pytest.mark.parametrize("mean, expected", [(0.05, st.SUPPORTED), (-0.05, st.CONTRADICTED),
                                            (0.002, "inconclusive at n = 5")])
def test_the_sign_rule_both_ways_and_inside_the_noise(mean, expected):
    assert st.sign_verdict(st.t_interval(seeds(mean, 0.01))) == expected


@pytest.mark.parametrize("mean, expected", [(0.1, st.SUPPORTED), (0.4, st.CONTRADICTED), (-0.2, st.CONTRADICTED),
                                            (0.245, "inconclusive at n = 5")])
def test_the_band_rule_inside_outside_and_on_the_edge(mean, expected):
    assert st.band_verdict(st.t_interval(seeds(mean, 0.01)), -0.05, 0.25) == expected


def test_a_claim_combines_its_comparisons():
    assert st.combine([st.SUPPORTED, st.SUPPORTED]) == st.SUPPORTED
    assert st.combine([st.CONTRADICTED] * 2) == st.CONTRADICTED
    assert st.combine([st.SUPPORTED, "inconclusive at n = 5", st.CONTRADICTED]) == st.MIXED
    assert st.combine([st.SUPPORTED, "inconclusive at n = 5", "inconclusive at n = 1"]) == "inconclusive at n = 1"
    assert st.combine([st.SUPPORTED, st.NOT_MEASURED]) == st.SUPPORTED
    assert st.combine([st.NOT_MEASURED]) == st.combine([]) == st.NOT_MEASURED


def test_seeds_needed_is_the_first_n_whose_interval_clears_the_difference():
    n = st.seeds_needed(0.01, 0.01)
    assert stats.t.ppf(0.975, n - 1) * 0.01 / math.sqrt(n) < 0.01 <= stats.t.ppf(0.975, n - 2) * 0.01 / math.sqrt(n - 1)
    assert st.seeds_needed(0.01, 0.01, models=2) > n  # two models' spreads add up
    assert st.seeds_needed(0.0, 0.01) is None and st.seeds_needed(0.01, 0.0) == 2


# ---------------------------------------------------------------------------------------------
# Each claim's rule on synthetic runs


# A claim whose rule is a band or a tolerance around one figure of astra_alpha: the figure's (mean, spread) over
# five seeds that the rule supports, contradicts and leaves open.
BAND_RULES = {
    "claim 1, a band": (sf.stateless_is_a_bigram, "stateless_minus_bigram_bpc", (0.10, 0.01), (0.60, 0.01), (0.24, 0.02)),
    "claim 6, a tolerance": (sf.validation_loss_matches_the_study, "val_batch_loss", (1.71, 0.01), (1.60, 0.01),
                             (1.74, 0.03)),
}


@pytest.mark.parametrize("claim", BAND_RULES)
def test_a_band_rule_supports_contradicts_or_leaves_open(claim):
    finding, figure, *cases = BAND_RULES[claim]
    for (mean, spread), verdict in zip(cases, (st.SUPPORTED, st.CONTRADICTED, "inconclusive at n = 5")):
        assert finding(frame_of({"astra_alpha": {figure: seeds(mean, spread)}})).verdict == verdict, (mean, spread)


def test_claim_1_judges_only_grus():
    lstm = frame_of({"astra_alpha": {"stateless_minus_bigram_bpc": seeds(0.10, 0.01)},
                     "leviathan": {"stateless_minus_bigram_bpc": seeds(0.9, 0.01)}}, cells={"leviathan": "lstm"})
    assert sf.stateless_is_a_bigram(lstm).verdict == st.SUPPORTED  # only GRUs are judged


def _astra(gaps: tuple[float, float], spread: float, horizons=(3.0, 4.0), n: int = 5) -> pd.DataFrame:
    return frame_of({f"astra_{size}": {"gap_bpc": seeds(gap, spread, n), "log2_context_horizon": [h] * n}
                     for size, gap, h in zip(("alpha", "beta"), gaps, horizons)})


def test_claim_2_welch_sign_both_ways_and_inside_the_noise():
    assert sf.sensitivity_grows_with_capacity(_astra((1.35, 1.53), 0.005)).verdict == st.SUPPORTED
    assert sf.sensitivity_grows_with_capacity(_astra((1.53, 1.35), 0.005, horizons=(4.0, 3.0))).verdict == st.CONTRADICTED
    noisy = sf.sensitivity_grows_with_capacity(_astra((1.520, 1.529), 0.008))  # claim 2's 0.009 inside a seed spread
    assert noisy.verdict == "inconclusive at n = 5"
    assert noisy.comparisons[0].needed > 5  # more seeds would be needed to decide it
    mixed = sf.sensitivity_grows_with_capacity(_astra((1.35, 1.53), 0.005, horizons=(4.0, 3.0)))
    assert mixed.verdict == st.MIXED  # the gap rises, the horizon falls
    one = sf.sensitivity_grows_with_capacity(_astra((1.35, 1.53), 0.005, n=1))
    assert one.verdict == "inconclusive at n = 1" and "| 1 |" in one.comparisons[0].row()


def test_claim_3_pairs_the_two_tokenizations_of_one_shape():
    frame = frame_of({"scribe_alpha": {"gap_bpc": seeds(0.64, 0.01)}, "astra_beta": {"gap_bpc": seeds(1.53, 0.01)}},
                     tokens={"scribe_alpha": "sentencepiece"})
    shapes = {"scribe_alpha": SHAPES["beta"], "astra_beta": SHAPES["beta"]}
    finding = sf.subwords_amplify_the_failure(frame, shapes)
    assert finding.verdict == st.CONTRADICTED and "scribe_alpha − astra_beta" in finding.comparisons[0].label
    assert sf.subwords_amplify_the_failure(frame, {"scribe_alpha": SHAPES["alpha"],
                                                   "astra_beta": SHAPES["beta"]}).verdict == st.NOT_MEASURED


def test_claim_4_is_paired_within_each_run():
    runs_spread = seeds(3.7, 0.05)  # the runs differ a lot; each run's two figures differ by a steady 0.03
    frame = frame_of({"astra_alpha": {"stateless_bpc": runs_spread,
                                      "first_epoch_stateful_bpc": [v - 0.03 + 0.001 * z for v, z in
                                                                   zip(runs_spread, OFFSETS)]}})
    assert sf.one_stateful_epoch_beats_stateless(frame).verdict == st.SUPPORTED
    frame["first_epoch_stateful_bpc"] = frame["stateless_bpc"] + 0.03
    assert sf.one_stateful_epoch_beats_stateless(frame).verdict == st.CONTRADICTED


def test_claim_5_best_epoch_of_every_seed_and_the_rise_after_it():
    overfit = frame_of({"leviathan": {"best_epoch": [2, 2, 3, 2, 2], "last_minus_best_val_loss": seeds(0.11, 0.01)}},
                       cells={"leviathan": "lstm"})
    assert sf.leviathan_overfits_early(overfit).verdict == st.SUPPORTED
    late = frame_of({"leviathan": {"best_epoch": [6, 6, 5, 6, 6], "last_minus_best_val_loss": seeds(0.001, 0.0005)}})
    assert sf.leviathan_overfits_early(late).verdict == st.CONTRADICTED
    split = frame_of({"leviathan": {"best_epoch": [2, 5, 3, 6, 2], "last_minus_best_val_loss": seeds(0.03, 0.02)}})
    assert sf.leviathan_overfits_early(split).verdict == "inconclusive at n = 5"
    one = frame_of({"leviathan": {"best_epoch": [2], "last_minus_best_val_loss": [0.11]}})
    assert sf.leviathan_overfits_early(one).verdict == "inconclusive at n = 1"
    assert sf.leviathan_overfits_early(frame_of({"astra_alpha": {"gap_bpc": [1.0]}})).verdict == st.NOT_MEASURED


def test_claim_6_judges_gamma_on_its_best_epoch():
    best = frame_of({"astra_gamma": {"best_val_batch_loss": seeds(1.40, 0.005), "val_batch_loss": seeds(1.6, 0.01)}})
    assert sf.validation_loss_matches_the_study(best).verdict == st.SUPPORTED  # γ is judged on its best epoch


def test_claim_6_leaves_out_runs_trained_before_the_column_and_says_so():
    frame = frame_of({"astra_alpha": {"val_batch_loss": [math.nan, *seeds(1.71, 0.01, 4)]}})
    comparison = sf.validation_loss_matches_the_study(frame).comparisons[0]
    assert comparison.interval.n == 4 and "1 run trained before the one-batch column left out" in comparison.row()
    old = frame_of({"astra_alpha": {"val_batch_loss": [math.nan]}})
    assert sf.validation_loss_matches_the_study(old).verdict == st.NOT_MEASURED


def test_every_finding_prints_rule_n_and_half_width():
    frame = _astra((1.35, 1.53), 0.005)
    text = "\n".join(sf.findings_markdown(sf.findings(frame, {m: SHAPES["alpha"] for m in frame["model"]})))
    assert "**Verdict: supported.** Rule: within each family" in text
    row = next(line for line in text.splitlines() if line.startswith("| gap: astra_beta − astra_alpha"))
    half = st.welch(seeds(1.53, 0.005), seeds(1.35, 0.005)).half_width
    assert f"| +0.180 | {half:.3f} | 5 | > 0 | supported |" in row
