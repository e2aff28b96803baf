"""The study's claims judged from run folders: each verdict follows its rule, both ways."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rnnlm.reporting import study_findings as sf
from rnnlm.reporting.study_report import StudyRun, load_runs

SIZES = {"alpha": (64, 128, 1), "beta": (128, 256, 2), "gamma": (256, 512, 3)}


def make_run(root: Path, model: str, *, tokens: str = "char", cell: str = "gru", size: str = "alpha",
             parameters: int = 1000, stateful: float = 2.4, stateless: float = 3.7, bigram: float = 3.6,
             horizon: int | None = 8, chars_per_token: float = 1.0, first_epoch: dict | None = None,
             val_losses: tuple[float, ...] = (1.8, 1.7), val_loss: float = 1.7, best_val_loss: float = 1.7) -> StudyRun:
    """A study folder as `collect` writes it, with only what the findings read."""
    folder = root / model
    folder.mkdir(parents=True)
    embd, hidden, layers = SIZES[size]
    entry = {"tokens": tokens, "cell": cell, "embd": embd, "hidden": hidden, "layers": layers, "epochs": len(val_losses)}
    (folder / "params.yaml").write_text(yaml.safe_dump({"model": model, "models": {model: entry}}))
    rows = "".join(f"{e}\t{2.0 - 0.1 * e}\t{v}\n" for e, v in enumerate(val_losses, 1))
    (folder / "epochs.tsv").write_text("epoch\ttrain_loss\tval_loss\n" + rows)
    tokens_scored = 10_000
    per_token = 0.6931471805599453 * chars_per_token  # nats per token for one bit per character
    metrics = {"model": model, "stateful_bpc": stateful, "stateless_bpc": stateless, "bigram_bpc": bigram,
               "context_horizon": horizon, "val_tokens": tokens_scored, "val_chars": round(tokens_scored * chars_per_token),
               "reset_curve_nats_per_token": {"1": stateless * per_token, "never": stateful * per_token},
               "text": {"stateless": {"known_word_share": 0.5}}, "first_epoch": first_epoch}
    train = {"model": model, "parameters": parameters, "val_loss": val_loss, "best_val_loss": best_val_loss}
    for name, value in (("metrics.json", metrics), ("train_metrics.json", train), ("provenance.json", {})):
        (folder / name).write_text(json.dumps(value))
    return next(r for r in load_runs(root) if r.model == model)


def test_a_stateless_gru_near_its_bigram_floor_supports_claim_1(tmp_path):
    runs = [make_run(tmp_path, "astra_alpha", stateless=3.75, bigram=3.59),
            make_run(tmp_path, "scribe_alpha", tokens="sentencepiece", stateless=2.6, bigram=2.62)]
    finding = sf.stateless_is_a_bigram(runs)
    assert finding.verdict == sf.SUPPORTED and "+0.160" in "\n".join(finding.table)
    runs.append(make_run(tmp_path, "astra_beta", stateless=3.0, bigram=3.59))  # far below the floor: memory
    assert sf.stateless_is_a_bigram(runs).verdict == sf.MIXED
    lstm = make_run(tmp_path, "leviathan", cell="lstm", stateless=2.0, bigram=3.59)  # not a GRU: not judged
    assert sf.stateless_is_a_bigram(runs[:2] + [lstm]).verdict == sf.SUPPORTED


def _family(root: Path, gaps: tuple[float, ...], horizons: tuple, tokens: str = "char", prefix: str = "astra"):
    return [make_run(root, f"{prefix}_{size}", tokens=tokens, size=size, parameters=10 ** (i + 3),
                     stateful=3.6 - gap, stateless=3.6, horizon=horizon)
            for i, (size, gap, horizon) in enumerate(zip(SIZES, gaps, horizons))]


def test_claim_2_asks_the_gap_to_rise_and_the_horizon_not_to_fall(tmp_path):
    assert sf.sensitivity_grows_with_capacity(_family(tmp_path / "a", (1.0, 1.2, 1.4), (8, 16, 16))).verdict == sf.SUPPORTED
    assert sf.sensitivity_grows_with_capacity(_family(tmp_path / "b", (1.0, 1.2, 1.4), (16, 8, 8))).verdict == sf.MIXED
    assert sf.sensitivity_grows_with_capacity(_family(tmp_path / "c", (1.4, 1.2, 1.0), (16, 8, 8))).verdict == sf.NOT_SUPPORTED
    # a missing horizon: judged on the gap alone, and said so
    finding = sf.sensitivity_grows_with_capacity(_family(tmp_path / "d", (1.0, 1.2, 1.4), (8, 16, None)))
    assert finding.verdict == sf.SUPPORTED and "judged on the gap alone" in finding.insight
    # two families that disagree: mixed
    both = _family(tmp_path / "e", (1.0, 1.2, 1.4), (8, 16, 16)) + _family(
        tmp_path / "e", (0.6, 0.5, 0.4), (16, 8, 8), tokens="sentencepiece", prefix="scribe")
    assert sf.sensitivity_grows_with_capacity(both).verdict == sf.MIXED


def test_claim_3_pairs_models_by_their_sizes_and_compares_bits_per_character(tmp_path):
    astra = make_run(tmp_path, "astra_beta", size="beta", stateful=2.1, stateless=3.6)
    scribe = make_run(tmp_path, "scribe_alpha", tokens="sentencepiece", size="beta", stateful=2.1, stateless=2.8,
                      chars_per_token=2.5)
    other = make_run(tmp_path, "scribe_gamma", tokens="sentencepiece", size="gamma", stateless=9.0)  # no Astra of its size
    finding = sf.subwords_amplify_the_failure([astra, scribe, other])
    assert finding.verdict == sf.NOT_SUPPORTED
    assert "2.50" in "\n".join(finding.table) and "scribe_gamma" not in "\n".join(finding.table)
    worse = make_run(tmp_path / "w", "scribe_alpha", tokens="sentencepiece", size="beta", stateful=2.1, stateless=3.9)
    assert sf.subwords_amplify_the_failure([astra, worse]).verdict == sf.SUPPORTED
    assert sf.subwords_amplify_the_failure([astra]).verdict == sf.NOT_MEASURED


def test_claim_4_needs_the_first_epochs_scores(tmp_path):
    kept = make_run(tmp_path, "astra_alpha", stateless=3.7, first_epoch={"stateful_bpc": 2.9, "stateless_bpc": 3.8})
    old = make_run(tmp_path, "astra_beta")
    finding = sf.one_stateful_epoch_beats_stateless([kept, old])
    assert finding.verdict == sf.SUPPORTED and "still to be measured: astra_beta" in finding.insight
    assert sf.one_stateful_epoch_beats_stateless([old]).verdict == sf.NOT_MEASURED
    assert "Here the inference mode is worth more" in finding.insight
    slow = make_run(tmp_path, "rnn_alpha", stateless=3.7, first_epoch={"stateful_bpc": 3.9, "stateless_bpc": 4.0})
    mixed = sf.one_stateful_epoch_beats_stateless([kept, slow])
    assert mixed.verdict == sf.MIXED
    assert "beat the final weights without it by 0.800 bits per character (astra_alpha)" in mixed.insight
    assert "They do not for rnn_alpha (+0.200 bits, epochs of — steps)" in mixed.insight and "worth more" not in mixed.insight


def test_claim_5_reads_leviathans_epoch_curve(tmp_path):
    early = make_run(tmp_path / "a", "leviathan", cell="lstm", val_losses=(1.53, 1.48, 1.50, 1.55, 1.59))
    assert sf.leviathan_overfits_early([early]).verdict == sf.SUPPORTED
    late = make_run(tmp_path / "b", "leviathan", cell="lstm", val_losses=(1.60, 1.55, 1.52, 1.50, 1.49))
    assert sf.leviathan_overfits_early([late]).verdict == sf.NOT_SUPPORTED
    flat = make_run(tmp_path / "c", "leviathan", cell="lstm", val_losses=(1.55, 1.50, 1.51, 1.51, 1.51))
    assert sf.leviathan_overfits_early([flat]).verdict == sf.MIXED  # best early, but no real rise after
    assert sf.leviathan_overfits_early([]).verdict == sf.NOT_MEASURED


def test_claim_6_compares_last_or_best_validation_loss_with_the_studys(tmp_path):
    runs = [make_run(tmp_path, "astra_alpha", val_loss=1.68), make_run(tmp_path, "astra_beta", val_loss=1.47),
            make_run(tmp_path, "astra_gamma", val_loss=1.50, best_val_loss=1.42)]
    finding = sf.validation_loss_matches_the_study(runs)
    assert finding.verdict == sf.SUPPORTED and "best 1.420" in "\n".join(finding.table)  # γ: the best epoch's
    assert "holds" in finding.insight
    runs[2] = make_run(tmp_path / "x", "astra_gamma", val_loss=1.50, best_val_loss=1.48)
    assert sf.validation_loss_matches_the_study(runs).verdict == sf.MIXED


def test_the_findings_section_names_every_claim_and_its_verdict(tmp_path):
    runs = _family(tmp_path, (1.0, 1.2, 1.4), (8, 16, 16))
    lines = sf.findings_markdown(runs)
    assert lines[0] == "## Findings"
    assert [line.split(".")[0] for line in lines if line.startswith("### ")] == [f"### {n}" for n in range(1, 7)]
    assert sum(line.startswith("**Verdict: ") for line in lines) == 6
    verdicts = sf.verdict_lines(runs, "reports/study.md")
    assert verdicts[1].startswith("2. **supported**") and verdicts[4].startswith("5. **not measured yet**")


@pytest.mark.parametrize("claim", sf.CLAIMS, ids=lambda c: c.__name__)
def test_no_runs_means_not_measured_never_a_verdict(claim):
    assert claim([]).verdict == sf.NOT_MEASURED
