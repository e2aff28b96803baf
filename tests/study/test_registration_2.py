"""A later registration in a study repository: registration 1 sealed with its confirmatory seeds, then a
second one for claim 4 alone, on fresh seeds, sealed before they were trained. What is read is git's:
which runs each registration's pass counts, the report's reading of each run, the conclusion drawn from
both passes, and the files git refuses."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from rnnlm.errors import RnnlmError
from rnnlm_study.campaign import collect as study_collect
from rnnlm_study.judging import report as study_report
from rnnlm_study.registration_git import registering_commit, seal
from tests.study.study_repo import commit, experiment, git, new_repo, study_params

ROOT = Path(__file__).resolve().parents[2]
STATELESS = 3.75  # every study-repository run's last stateless score (tests.study.study_repo.run_metrics)
FIRST_PASS = {5: 3.85, 6: 3.70, 7: 3.77, 8: 3.72, 9: 3.81}  # epoch-1 stateful: figures -0.10 .. +0.05
SECOND_PASS = {11: 3.60, 12: 3.62, 13: 3.59}  # figures +0.15, +0.13, +0.16
BEFORE_IT = 4.50  # seed 10, trained before registration 2 was committed: -0.75, were it ever counted
ROW = "beta: last stateless − epoch-1 stateful (paired)"


def _registration_1() -> str:
    """The study's registration 1 with claim 4's confirmatory row the study repository's beta."""
    text = (ROOT / "reports/study/registration-1.yaml").read_text(encoding="utf-8")
    rows = "confirmatory_rows: [astra_alpha, astra_beta, scribe_alpha, scribe_beta, rnn_alpha, bengio_mlp]"
    assert text.count(rows) == 1
    return text.replace(rows, "confirmatory_rows: [beta]")


def _registration_2(seeds: str = "[10, 11, 12, 13]", scope: str | None = "scope: [4]") -> str:
    """The study's registration 2 for beta, seeds 10-13, judged on three of them."""
    text = (ROOT / "reports/study/registration-2.yaml").read_text(encoding="utf-8")
    for old, new in (("seeds: [10, 11, 12, 13, 14, 15, 16]", f"seeds: {seeds}"), ("at_least: 7", "at_least: 3"),
                     ("confirmatory_rows: [scribe_beta]", "confirmatory_rows: [beta]"),
                     ("\n  models: [scribe_beta]", "\n  models: [beta]"), ("scope: [4]", scope or "")):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def _register(repo: Path, name: str, text: str, date: str) -> str:
    """Commit `text` as reports/study/`name` and seal it; returns the commit that added it."""
    (repo / "reports/study" / name).write_text(text, encoding="utf-8")
    added = commit(repo, f"register {name}", date)
    seal(repo, repo / "reports/study" / name)
    commit(repo, f"seal {name}", date.replace(":00+", ":30+"))
    return added


def _study(tmp_path: Path) -> tuple[Path, str, str]:
    """Registration 1, beta's seeds 5-9 after it, beta seed 10 (a seed registration 2 will name), then
    registration 2 and after it beta seeds 11-13 and one alpha run of seed 12 (a model it does not
    judge). Returns the repository and the commits that added the two registrations."""
    repo = new_repo(tmp_path, rules=False)
    first = _register(repo, "registration-1.yaml", _registration_1(), "2026-01-02T11:00:00+00:00")
    for seed, first_epoch in FIRST_PASS.items():
        experiment(repo, f"beta-seed{seed}", "beta", 1.0, 2.2, f"2026-01-02T12:0{seed}:00+00:00", seed, first_epoch)
    experiment(repo, "beta-seed10", "beta", 1.0, 2.2, "2026-01-02T13:00:00+00:00", 10, BEFORE_IT)
    second = _register(repo, "registration-2.yaml", _registration_2(), "2026-01-03T11:00:00+00:00")
    for seed, first_epoch in SECOND_PASS.items():
        experiment(repo, f"beta-seed{seed}", "beta", 1.0, 2.2, f"2026-01-03T12:{seed}:00+00:00", seed, first_epoch)
    experiment(repo, "alpha-seed12", "alpha", 1.0, 2.5, "2026-01-03T13:00:00+00:00", 12, 3.9)
    return repo, first, second


def _report(repo: Path) -> tuple[str, dict]:
    reports = repo / "reports"
    study_report.report(reports / "study", reports / "study.md", reports / "study.png", str(study_params(repo)))
    return (reports / "study.md").read_text(), json.loads((reports / "study/findings.json").read_text())


def _row(record: dict, name: str) -> dict:
    return next(c for c in record["claim_4"][name]["comparisons"] if c["comparison"] == ROW)


@pytest.fixture
def study(tmp_path):
    repo, first, second = _study(tmp_path)
    study_collect.collect(repo, repo / "reports/study")
    return repo, first, second


def test_each_run_records_the_registration_that_names_its_seed(study):
    repo, first, second = study
    out = repo / "reports/study"

    def registration(model, seed):
        return json.loads((out / f"{model}/seed-{seed}/provenance.json").read_text()).get("registration")

    assert registration("beta", 5) == {"file": "registration-1.yaml", "commit": first, "code_descends": True}
    assert registration("beta", 11) == {"file": "registration-2.yaml", "commit": second, "code_descends": True}
    assert registration("beta", 10) == {"file": "registration-2.yaml", "commit": second, "code_descends": False}
    assert registration("alpha", 12)["file"] == "registration-2.yaml"
    assert registration("alpha", 1337) is None


def test_the_second_pass_reads_its_own_seeds_trained_after_it_and_nothing_else(study):
    repo, _, second = study
    text, record = _report(repo)
    again = _row(record, "registration_2")
    assert again["n"] == 3 and again["per_run"][0] == pytest.approx([STATELESS - v for v in SECOND_PASS.values()])
    assert record["claim_4"]["registration_2"]["verdict"] == "supported"
    assert [c["comparison"] for c in record["claim_4"]["registration_2"]["comparisons"]] == [ROW]
    assert record["registration_2"]["commit"] == second
    assert set(record["claim_4"]) >= {"exploratory", "confirmatory", "registration_2", "conclusion"}
    assert all("registration_2" not in record[f"claim_{n}"] for n in (1, 2, 3, 5, 6, 7))
    # Registration 1's passes read seeds 5-9 alone, as they did before registration 2: neither seed 10
    # nor any seed registration 2 names counts in them.
    for name in ("exploratory", "confirmatory"):
        row = _row(record, name)
        assert row["n"] == 5 and row["per_run"][0] == pytest.approx([STATELESS - v for v in FIRST_PASS.values()])
    assert record["claim_4"]["confirmatory"]["verdict"].startswith("inconclusive")
    assert record["claim_4"]["conclusion"] == {
        "verdict": "supported", "verdict_code": record["claim_4"]["registration_2"]["verdict_code"],
        "rows": [{"comparison": ROW, "verdict": "supported", "decided_by": "registration 2"}], "waiting": []}
    assert "**Exploratory verdict: inconclusive at n = 5**. **Confirmatory verdict: inconclusive at n = 5**. " \
           "**Registration 2 verdict: supported**." in text
    assert "**The study concludes: supported**, by the claim's form over each confirmatory row at its newest " \
           "judgement, never pooled: beta: last stateless − epoch-1 stateful — supported (registration 2)." in text
    reading = {}  # (model, seed) -> how the report reads the run, from its table of every run
    for line in text.splitlines():
        if (found := re.match(r"\| \[(\w+)\]\(\S+\) \| (\d+) \| .* \| ([^|]+) \|$", line)):
            reading[found[1], int(found[2])] = found[3]
    assert {key: reading[key] for key in [("beta", 5), ("beta", 11), ("beta", 10), ("alpha", 12)]} == {
        ("beta", 5): "confirmatory", ("beta", 11): "confirmatory, registration 2",
        ("beta", 10): "left out: a seed of registration 2 outside its pass",
        ("alpha", 12): "left out: a seed of registration 2 outside its pass"}


def test_the_second_pass_waits_until_it_has_its_registered_seeds(tmp_path):
    repo, _, _ = _study(tmp_path)
    out = repo / "reports/study"
    study_collect.collect(repo, out)
    shutil.rmtree(out / "beta/seed-13")  # as if the last of its three were not collected yet
    _, record = _report(repo)
    assert (record["claim_4"]["registration_2"]["verdict"], record["claim_4"]["registration_2"]["rows_waiting"]) == (
        "not measured yet", 1)
    assert record["claim_4"]["registration_2"]["waiting"] == {ROW: "waits for 1 more of beta (seeds of registration 2)"}
    assert record["claim_4"]["conclusion"]["rows"] == [
        {"comparison": ROW, "verdict": record["claim_4"]["confirmatory"]["verdict"], "decided_by": "confirmatory"}]


@pytest.mark.parametrize("spoil, message", [
    (lambda repo: ((repo / "reports/study/registration-2.yaml").write_text(_registration_2().replace(
        "edge: 0.0\n", "edge: 0.01\n", 1)), commit(repo, "edit it", "2026-01-04T10:00:00+00:00")),
     r"registration-2.yaml: changed after the commit that registered it"),
    (lambda repo: _register(repo, "registration-3.yaml", _registration_2("[20, 21, 22]", scope=None).replace(
        "registration: 2", "registration: 3"), "2026-01-04T11:00:00+00:00"),
     r"registration-3.yaml: no scope; expected a later registration to name the claims it judges again"),
    (lambda repo: _register(repo, "registration-3.yaml", _registration_2("[13, 20, 21]").replace(
        "registration: 2", "registration: 3"), "2026-01-04T11:00:00+00:00"),
     r"registration-3.yaml: names seeds \[13\], which an earlier registration names; expected fresh seeds"),
], ids=["registration 2 edited", "a third without scope", "a third sharing a seed"])
def test_a_later_registration_git_does_not_bear_out_stops_the_report(study, spoil, message):
    repo, _, _ = study
    spoil(repo)
    with pytest.raises(RnnlmError, match=message) as error:
        _report(repo)
    assert "\n" not in str(error.value)


def test_the_first_registration_may_not_have_a_scope(tmp_path):
    repo = new_repo(tmp_path, rules=False)
    _register(repo, "registration-1.yaml", "scope: [4]\n" + _registration_1(), "2026-01-02T11:00:00+00:00")
    with pytest.raises(RnnlmError, match=r"registration-1.yaml: the first registration has a scope; expected it to "
                                         r"register every claim"):
        study_collect.collect(repo, repo / "reports/study")


def test_a_registration_renamed_from_another_is_refused_and_one_copied_from_another_is_not(tmp_path):
    repo = new_repo(tmp_path, rules=False)
    study = repo / "reports/study"
    (study / "draft.yaml").write_text(_registration_2(), encoding="utf-8")
    commit(repo, "a draft", "2026-01-02T10:00:00+00:00")
    git(repo, "mv", "reports/study/draft.yaml", "reports/study/registration-2.yaml")
    moved = commit(repo, "register it by renaming the draft", "2026-01-02T11:00:00+00:00")
    with pytest.raises(RnnlmError, match=rf"registration-2.yaml: renamed from reports/study/draft.yaml by "
                                         rf"{moved[:7]}; a registration keeps the name"):
        registering_commit(repo, study / "registration-2.yaml")
    copied = _register(repo, "registration-3.yaml", _registration_2().replace("registration: 2", "registration: 3"),
                       "2026-01-03T11:00:00+00:00")
    assert registering_commit(repo, study / "registration-3.yaml") == copied


def test_the_studys_registration_2_parses_as_registered():
    from rnnlm_study.registration import load_registration

    second = load_registration(ROOT / "reports/study/registration-2.yaml")
    assert (second.scope, second.seeds, second.at_least) == ((4,), tuple(range(10, 17)), 7)
    assert second.row_models == frozenset({"scribe_beta"}) and second.judges(4) and not second.judges(2)
    assert yaml.safe_load((ROOT / "reports/study/registration-2.yaml").read_text())["registration"] == 2
