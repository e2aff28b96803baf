"""The study's second reading: exact tests beside the t rows, the text resampled with the seeds, the
sensitivity grid, the confirmatory pass on the registered seeds alone, and the report's reading of
each run (confirmatory, exploratory, or left out for its tokenizer) from the folders alone."""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rnnlm.errors import RnnlmError
from rnnlm.evaluation.blocks import BlockTable
from rnnlm_study.campaign import collect as study_collect
from rnnlm_study.judging import report as study_report
from rnnlm_study.judging import stats as st
from rnnlm_study.judging.evidence import Evidence, TextSampling
from rnnlm_study.judging.exact import permutation, sign_flip
from rnnlm_study.judging.findings import confirmatory, exploratory
from rnnlm_study.judging.findings_markdown import findings_markdown
from rnnlm_study.piece_counts import other_tokenizer_runs
from rnnlm_study.registration_git import seal
from rnnlm_study.judging.text_sample import text_interval
from rnnlm_study.judging.verdicts import CONTRADICTED, SUPPORTED, inconclusive
from tests.study.study_repo import commit, experiment, git, new_repo, study_params
from tests.study.test_study_findings import NO_EPOCHS, REGISTRATION, SHAPES, frame_of, seeds


def test_the_sign_flip_test_counts_every_assignment_of_signs():
    """Three positive values: only the assignment that keeps every sign is as large (1/8); against
    an edge above them all, every assignment is at least as small."""
    test = sign_flip([1.0, 2.0, 3.0])
    assert (test.above, test.below, test.smallest, test.n) == (1 / 8, 1.0, 1 / 8, 3)
    mixed = sign_flip([0.5, -0.1, 0.2, 0.3], edge=0.0)
    flips = [np.mean([s * v for s, v in zip(signs, (0.5, -0.1, 0.2, 0.3))])
             for signs in np.array(np.meshgrid(*[[1, -1]] * 4)).T.reshape(-1, 4)]
    assert mixed.above == pytest.approx(np.mean([f >= 0.225 - 1e-12 for f in flips]))
    assert sign_flip([1.0, 2.0, 3.0], edge=5.0).below == 1 / 8


def test_the_permutation_test_is_scipys_exact_one():
    from scipy import stats

    a, b = [1.52, 1.55, 1.50, 1.58, 1.53], [1.35, 1.40, 1.36, 1.38, 1.31]
    ours = permutation(a, b, edge=0.1)
    theirs = stats.permutation_test(([x - 0.1 for x in a], b), lambda x, y: np.mean(x) - np.mean(y),
                                    permutation_type="independent", alternative="greater", n_resamples=np.inf)
    assert ours.above == pytest.approx(theirs.pvalue) and ours.smallest == 1 / math.comb(10, 5)
    assert permutation(a, b).above == 1 / 252  # every a above every b: only the split as observed
    # Unequal sizes, each way round, and again at another edge (the table of splits is built once
    # per shape and shared): still scipy's p-values.
    for first, second in ((a[:3], b), (a, b[:2])):
        for edge in (0.1, 0.2):
            shifted = [x - edge for x in first]
            for alternative, ours_p in (("greater", "above"), ("less", "below")):
                theirs = stats.permutation_test((shifted, second), lambda x, y: np.mean(x) - np.mean(y),
                                                permutation_type="independent", alternative=alternative,
                                                n_resamples=np.inf)
                assert getattr(permutation(first, second, edge), ours_p) == pytest.approx(theirs.pvalue)


def test_holms_adjusted_p_values_as_worked_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04: x4, x3, x2, x1, each at least the one before
    assert st.holm_adjusted([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert st.holm_adjusted([0.5, None]) == [0.5, None]


def _blocks(level: float, noise: np.ndarray) -> BlockTable:
    chars = [2048] * len(noise)
    return BlockTable(list(range(0, 2048 * len(noise), 2048)), chars, chars,
                      {"stateful": list((level + noise) * 2048 * math.log(2)), "stateless": [0.0] * len(noise),
                       "bigram": [0.0] * len(noise)})


def test_resampling_the_text_widens_an_interval_the_seeds_alone_leave_narrow():
    """Five runs of one model that agree exactly but a text whose blocks differ: the seeds-only
    bootstrap has no width, the joint one does; the same label gives the same draws."""
    noise = np.random.default_rng(0).normal(0, 0.1, size=55)
    runs = [_blocks(2.4, noise) for _ in range(5)]
    interval = text_interval("row", runs, {"stateful": 1.0}, 2000, 7)
    assert interval.seeds_half_width == pytest.approx(0, abs=1e-12) and interval.half_width > 0.01
    assert interval.low < 2.4 + noise.mean() < interval.high
    assert interval == text_interval("row", runs, {"stateful": 1.0}, 2000, 7)
    assert text_interval("row", runs, {"stateful": 1.0}, 2000, 7, [_blocks(2.4, noise[:-1])]) is None  # other blocks
    other = [_blocks(2.3, noise) for _ in range(5)]
    between = text_interval("two", runs, {"stateful": 1.0}, 2000, 7, other)
    assert between.low == pytest.approx(0.1) and between.high == pytest.approx(0.1)  # the same blocks for both


def _frame_with_blocks(models: dict, n: int = 5):
    frame = frame_of(models)
    rng = np.random.default_rng(1)
    blocks = {(m, int(s)): _blocks(v, rng.normal(0, 0.05, size=10))
              for m, s, v in zip(frame["model"], frame["seed"], frame["stateful_bpc"])}
    return frame, blocks


def test_a_row_carries_its_text_interval_where_every_run_has_blocks():
    frame, blocks = _frame_with_blocks({"astra_alpha": {"stateful_bpc": seeds(2.40, 0.005)},
                                        "astra_alpha_carried": {"stateful_bpc": seeds(2.35, 0.005)}})
    frame.loc[frame["model"] == "astra_alpha_carried", "training"] = "carried"
    evidence = Evidence(frame, NO_EPOCHS, {"astra_alpha": SHAPES["alpha"], "astra_alpha_carried": SHAPES["alpha"]},
                        blocks,
                        TextSampling(500, 3))
    (gain, _) = exploratory(evidence, REGISTRATION).findings[6].comparisons
    assert gain.text is not None and gain.text.low < gain.interval.estimate < gain.text.high
    assert gain.text.wider >= 1.0
    del blocks[("astra_alpha", 1)]
    (gain, _) = exploratory(evidence, REGISTRATION).findings[6].comparisons
    assert gain.text is None  # one run without its blocks: no text interval for the row


def test_a_verdict_that_hinges_on_the_edge_shows_in_the_grid():
    frame = frame_of({"astra_alpha": {"gap_bpc": seeds(1.35, 0.004)}, "astra_beta": {"gap_bpc": seeds(1.42, 0.004)}})
    found = exploratory(Evidence(frame, NO_EPOCHS, {"astra_alpha": SHAPES["alpha"], "astra_beta": SHAPES["beta"]}),
                        REGISTRATION)
    finding = found.findings[1]
    (row,) = finding.comparisons
    assert [v for _, v in row.grid] == [SUPPORTED, SUPPORTED, SUPPORTED, CONTRADICTED]  # 0, 0.025, 0.05, 0.10
    assert [v for _, v in finding.sensitivity["gap_growth"]] == [SUPPORTED, SUPPORTED, SUPPORTED, CONTRADICTED]
    text = "\n".join(findings_markdown([found], [REGISTRATION]))
    assert "| the claim (all) | **supported** | **supported** | **supported** | **contradicted** |" in text


def test_a_t_verdict_the_exact_test_cannot_reach_says_so():
    frame = frame_of({"astra_alpha": {"stateless_minus_bigram_bpc": seeds(0.16, 0.005)}})
    found = exploratory(Evidence(frame, NO_EPOCHS, {"astra_alpha": SHAPES["alpha"]}), REGISTRATION)
    (row,) = found.findings[0].comparisons
    assert row.verdict == SUPPORTED and row.exact_decision.verdict == inconclusive(5)
    text = "\n".join(findings_markdown([found], [REGISTRATION]))
    line = next(x for x in text.splitlines() if x.startswith("| astra_alpha: stateless − bigram"))
    assert "| supported (t only) | cannot reach 0.05 at n = 5 (p ≥ 0.031 one-sided) |" in line


def test_the_confirmatory_pass_judges_a_row_once_each_model_has_five_registered_seeds():
    study = {"astra_alpha": {"gap_bpc": seeds(1.35, 0.005)}, "astra_beta": {"gap_bpc": seeds(1.53, 0.005)},
             "scribe_alpha": {"gap_bpc": seeds(0.64, 0.005, n=3)}, "scribe_beta": {"gap_bpc": seeds(0.60, 0.005, n=3)}}
    frame = frame_of(study, tokens={"scribe_alpha": "sentencepiece", "scribe_beta": "sentencepiece"})
    shapes = {"astra_alpha": SHAPES["alpha"], "astra_beta": SHAPES["beta"], "scribe_alpha": SHAPES["beta"],
              "scribe_beta": SHAPES["gamma"]}
    evidence = Evidence(frame, NO_EPOCHS, shapes)
    first = exploratory(evidence, REGISTRATION)
    second = confirmatory(evidence, REGISTRATION, first)
    claim_2 = second.findings[1]
    assert [c.label for c in claim_2.comparisons] == ["gap: astra_beta − astra_alpha (bits/char)"]
    assert claim_2.verdict == SUPPORTED
    assert dict(claim_2.waiting) == {"gap: scribe_beta − scribe_alpha (bits/char)":
                                     "waits for 2 more of scribe_beta and 2 more of scribe_alpha (confirmatory seeds)"}
    alone = confirmatory(evidence.where(frame["model"] == "astra_alpha"), REGISTRATION, first)
    assert alone.findings[1].comparisons == [] and dict(alone.findings[1].waiting)[
        "gap: astra_beta − astra_alpha (bits/char)"] == "no confirmatory runs yet"


# ----- the report's reading of the folders --------------------------------------------------------

def _sealed_repo(tmp_path):
    """A study repository with the registration committed and sealed, one run before it (seed 6) and
    after it two of seed 5 (a char model and two SentencePiece runs of unequal tokenizers)."""
    repo = new_repo(tmp_path, rules=False)
    experiment(repo, "beta-seed6", "beta", 1.0, 2.26, "2026-01-02T10:00:00+00:00", seed=6)
    (repo / "reports/study").mkdir(parents=True, exist_ok=True)
    shutil.copy(REGISTRATION.path, repo / "reports/study/registration-1.yaml")
    registered = commit(repo, "register", "2026-01-02T11:00:00+00:00")
    seal(repo, repo / "reports/study/registration-1.yaml")
    commit(repo, "seal", "2026-01-02T11:30:00+00:00")
    experiment(repo, "beta-seed5", "beta", 1.0, 2.20, "2026-01-02T12:00:00+00:00", seed=5)
    return repo, registered


def test_a_run_trained_after_the_registration_reads_as_confirmatory_one_before_as_exploratory(tmp_path):
    repo, registered = _sealed_repo(tmp_path)
    out = repo / "reports/study"
    study_collect.collect(repo, out)
    after = json.loads((out / "beta/seed-5/provenance.json").read_text())["registration"]
    before = json.loads((out / "beta/seed-6/provenance.json").read_text())["registration"]
    assert after == {"file": "registration-1.yaml", "commit": registered, "code_descends": True}
    assert before == {**after, "code_descends": False}
    assert "registration" not in json.loads((out / "alpha/seed-1337/provenance.json").read_text())
    reports = repo / "reports"
    study_report.report(out, reports / "study.md", reports / "study.png", str(study_params(repo)))
    text = (reports / "study.md").read_text()
    rows = {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| [beta](")}
    assert rows["5"].endswith("| confirmatory |") and rows["6"].endswith("| exploratory |")
    assert f"commit {registered[:7]}" in text
    for seed in (5, 6):  # the reading is git's: the record collect wrote is a courtesy, not a source
        _edit_provenance(out / f"beta/seed-{seed}", lambda p: p.pop("registration"))
    study_report.report(out, reports / "study.md", reports / "study.png", str(study_params(repo)))
    assert (reports / "study.md").read_text() == text


def _edit_provenance(folder, edit):
    path = folder / "provenance.json"
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record, indent=2))


@pytest.mark.parametrize("forge, message", [
    (lambda p: p["registration"].update(code_descends=True),
     r"beta/seed-6/provenance.json: says its code descends from registration-1.yaml \(\w{7}\), which git does not "
     r"bear out; expected the record `collect` writes from git"),
    (lambda p: p.update(commit="0" * 40),
     r"beta/seed-6/provenance.json: records the commit '0{40}', which this repository does not hold; expected the "
     r"commit the run was trained on"),
    (lambda p: p["registration"].update(file="registration-9.yaml"),
     r"beta/seed-6/provenance.json: says its code does not descend from registration-9.yaml .* \(no such "
     r"registration\)"),
    (lambda p: p["registration"].update(commit="1" * 40),
     r"beta/seed-6/provenance.json: says its code does not descend from registration-1.yaml \(1111111\), which git "
     r"does not bear out \(registration-1.yaml was added by \w{7}\)"),
], ids=["descends, says the folder", "a commit git lacks", "another registration", "another commit"])
def test_a_forged_provenance_stops_the_report(tmp_path, forge, message):
    """Seed 6 was trained before the registration: a folder that says otherwise, or names a commit git
    does not hold, is refused in one line; nothing is written."""
    repo, _ = _sealed_repo(tmp_path)
    out = repo / "reports/study"
    study_collect.collect(repo, out)
    _edit_provenance(out / "beta/seed-6", forge)
    with pytest.raises(RnnlmError, match=message):
        study_report.report(out, repo / "reports/study.md", repo / "reports/study.png", str(study_params(repo)))
    assert not (repo / "reports/study.md").exists()


def _edit_and_reseal(repo, out):
    path = out / "registration-1.yaml"
    path.write_text(path.read_text().replace("edge: 0.05", "edge: 0.04", 1))
    sealed = out / "sealed.tsv"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    lines = sealed.read_text().splitlines()
    name, _, commit, date = lines[1].split("\t")
    sealed.write_text("\n".join([lines[0], "\t".join([name, digest, commit, date])]) + "\n")


def _second_registration(repo, out):
    shutil.copy(out / "registration-1.yaml", out / "registration-2.yaml")


def _other_commit(repo, out):
    sealed = out / "sealed.tsv"
    head = git(repo, "rev-parse", "HEAD").strip()
    text = sealed.read_text()
    sealed.write_text(re.sub(r"\t[0-9a-f]{40}\t", f"\t{head}\t", text))


@pytest.mark.parametrize("spoil, message", [
    (lambda repo, out: _edit_and_reseal(repo, out),
     r"registration-1.yaml: differs from the registered file of \w{7}; a rule change is a new registration"),
    (lambda repo, out: (_edit_and_reseal(repo, out), commit(repo, "edited", "2026-01-03T10:00:00+00:00")),
     r"registration-1.yaml: changed after the commit that registered it"),
    (lambda repo, out: _second_registration(repo, out),
     r"registration-2.yaml: not committed; a registration counts from the commit that adds it"),
    (lambda repo, out: (out / "sealed.tsv").unlink(),
     r"sealed.tsv: no line for registration-1.yaml; expected each registration sealed"),
    (lambda repo, out: _other_commit(repo, out),
     r"sealed.tsv: records registration-1.yaml as \w{12} added by \w{12}, but git holds \w{12} added by \w{12}"),
    (lambda repo, out: (out / "sealed.tsv").write_bytes(b"file\tsha256\n\xff\xfe"),
     r"sealed.tsv: cannot be read \(not UTF-8 text\)"),
    (lambda repo, out: (out / "registration-1.yaml").unlink(),
     r"registration-1.yaml: committed but missing here"),
], ids=["edited and resealed", "edited, committed and resealed", "an unsealed second one", "sealed.tsv deleted",
        "sealed.tsv naming another commit", "sealed.tsv not text", "registration deleted"])
def test_a_registration_git_does_not_bear_out_stops_the_report(tmp_path, spoil, message):
    """Which rules count, and from when, is read from git: the bytes committed by the one commit that
    added each registration, which sealed.tsv must record as git does. Each of these changed the
    verdicts silently before."""
    repo, _ = _sealed_repo(tmp_path)
    out = repo / "reports/study"
    study_collect.collect(repo, out)
    spoil(repo, out)
    with pytest.raises(RnnlmError, match=message) as error:
        study_report.report(out, repo / "reports/study.md", repo / "reports/study.png", str(study_params(repo)))
    assert "\n" not in str(error.value) and not (repo / "reports/study.md").exists()


def test_a_sentencepiece_run_of_another_tokenizer_is_marked_and_left_out():
    frame = pd.DataFrame({"model": ["s", "s", "s", "c"], "seed": [1, 2, 3, 1],
                          "tokens": ["sentencepiece"] * 3 + ["char"], "val_tokens": [49634, 49939, 49634, 111539]})
    assert study_report.other_tokenizers(frame) == {
        ("s", 2): "another tokenizer (49,939 validation pieces against 49,634)"}


def test_the_usual_piece_count_is_the_most_common_and_the_smaller_on_a_tie():
    assert other_tokenizer_runs({}) == {}
    assert other_tokenizer_runs({"a": 7, "b": 9}) == {"b": "another tokenizer (9 validation pieces against 7)"}
    assert other_tokenizer_runs({"a": 9, "b": 9, "c": 7}) == {"c": "another tokenizer (7 validation pieces against 9)"}


def test_collect_says_when_it_takes_a_run_of_another_tokenizer(tmp_path):
    out = tmp_path / "study"
    for seed, pieces in ((1, 49634), (2, 49634), (3, 49939)):
        folder = out / "scribe" / f"seed-{seed}"
        folder.mkdir(parents=True)
        (folder / "metrics.json").write_text(json.dumps({"tokens": "sentencepiece", "val_tokens": pieces}))
    assert study_collect.tokenizer_notes(out) == {"scribe seed 3":
        "scribe seed 3: another tokenizer (49,939 validation pieces against 49,634): marked and left out of the "
        "study's claims"}



def test_a_run_of_another_tokenizer_is_left_out_of_every_summary_of_the_committed_study():
    """One tokenizer per model, everywhere: the runs the claims leave out (while they are in the study:
    scribe_gamma seeds 1 and 2, tokenized by another SentencePiece into 49,939 validation pieces) are
    not counted in summary.csv or summary.json either."""
    study = Path(__file__).resolve().parents[2] / "reports/study"
    runs = pd.read_csv(study / "runs.csv")
    left_out = study_report.other_tokenizers(runs)
    other = runs[(runs["model"] == "scribe_gamma") & (runs["val_tokens"] == 49939)]
    assert {("scribe_gamma", int(s)) for s in other["seed"]} <= set(left_out)
    kept = runs[[(m, int(s)) not in left_out for m, s in zip(runs["model"], runs["seed"])]]
    summary = json.loads((study / "summary.json").read_text())
    kept_seeds = kept.groupby("model").size().to_dict()
    assert {m: summary[m]["seeds"] for m in summary} == kept_seeds
    frame = pd.read_csv(study / "summary.csv")
    gap = frame.loc[(frame["model"] == "scribe_gamma") & (frame["figure"] == "gap_bpc"), "n"]
    assert gap.tolist() == [kept_seeds["scribe_gamma"]]
