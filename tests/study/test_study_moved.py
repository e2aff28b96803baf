"""What `report` says moved in findings.json: every verdict and waiting row that changed, exactly,
and nothing when nothing did."""

from __future__ import annotations

import copy
import json

import pytest

from rnnlm_study.campaign import collect as study_collect
from rnnlm_study.judging.moved import read_findings, verdicts_moved
from tests.conftest import REPO_ROOT
from tests.study.study_repo import new_repo

REGISTRATION = {"file": "registration-1.yaml", "sha256": "ab" * 32, "commit": "c" * 40, "date": "2026-01-01"}


def _row(label: str, verdict: str) -> dict:
    return {"comparison": label, "verdict": verdict, "estimate": 0.1}


def _record() -> dict:
    """Two claims; claim 2's confirmatory pass has a row waiting."""
    return {
        "registration": dict(REGISTRATION),
        "claim_1": {"exploratory": {"verdict": "supported", "comparisons": [_row("a: x", "supported")], "waiting": {}},
                    "confirmatory": {"verdict": "supported", "comparisons": [_row("a: x", "supported")],
                                     "waiting": {}}},
        "claim_2": {"exploratory": {"verdict": "contradicted", "comparisons": [_row("b − a", "supported"),
                                                                               _row("c − b", "contradicted")],
                                    "waiting": {}},
                    "confirmatory": {"verdict": "supported", "comparisons": [_row("b − a", "supported")],
                                     "waiting": {"c − b": "waits for 2 more of c (confirmatory seeds)"}}},
    }


def test_the_same_findings_move_nothing_even_where_the_figures_do():
    after = _record()
    after["claim_1"]["exploratory"]["comparisons"][0]["estimate"] = 0.2
    assert verdicts_moved(_record(), after) == ["no verdict moved (2 claims, every pass, every row)"]


def test_each_change_is_one_line_in_claim_and_pass_order():
    before, after = _record(), _record()
    waiting = after["claim_2"]["confirmatory"]
    waiting["waiting"]["c − b"] = "waits for 1 more of c (confirmatory seeds)"  # a seed more, still waiting
    after["claim_1"]["exploratory"]["comparisons"][0]["verdict"] = "inconclusive at n = 6"
    after["claim_1"]["exploratory"]["verdict"] = "inconclusive at n = 6"
    after["claim_2"]["exploratory"]["comparisons"].pop()  # a row no longer read
    assert verdicts_moved(before, after) == [
        "claim 1, exploratory: supported -> inconclusive at n = 6",
        "claim 1, exploratory, a: x: supported -> inconclusive at n = 6",
        "claim 2, exploratory, c − b: contradicted -> absent",
        "claim 2, confirmatory, c − b: waits for 2 more of c (confirmatory seeds) -> "
        "waits for 1 more of c (confirmatory seeds)",
    ]
    judged = copy.deepcopy(after)  # the last seed: the row is judged and decides the claim
    judged["claim_2"]["confirmatory"]["waiting"] = {}
    judged["claim_2"]["confirmatory"]["comparisons"].append(_row("c − b", "contradicted"))
    judged["claim_2"]["confirmatory"]["verdict"] = "contradicted"
    assert verdicts_moved(after, judged) == [
        "claim 2, confirmatory: supported -> contradicted",
        "claim 2, confirmatory, c − b: waits for 1 more of c (confirmatory seeds) -> contradicted",
    ]


def test_a_claim_new_to_the_record_has_every_row_from_absent():
    before = _record()
    del before["claim_2"]
    assert verdicts_moved(before, _record())[:3] == [
        "claim 2, exploratory: absent -> contradicted",
        "claim 2, exploratory, b − a: absent -> supported",
        "claim 2, exploratory, c − b: absent -> contradicted",
    ]


def test_no_earlier_record_or_other_rules_are_said_and_not_compared():
    assert verdicts_moved(None, _record()) == ["no earlier findings.json to compare with: every verdict is new"]
    other = _record()
    other["registration"]["sha256"] = "cd" * 32
    assert verdicts_moved(other, _record()) == ["the registration changed: verdicts under other rules are not compared"]


@pytest.mark.parametrize("text", [None, "", '{"claim_1": ', "[1, 2]", b"\xff\xfe"])
def test_read_findings_is_none_where_there_is_no_record(tmp_path, text):
    path = tmp_path / "findings.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    assert read_findings(path) is None
    path.write_text(json.dumps(_record()))
    assert read_findings(path) == _record()


def test_the_report_command_prints_what_moved(tmp_path, study_cli):
    repo = new_repo(tmp_path)
    study_collect.collect(repo, repo / "reports/study")
    report = ["report", "--params", str(REPO_ROOT / "params.yaml")]
    first = study_cli(repo, *report)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[1:] == ["no earlier findings.json to compare with: every verdict is new"]
    again = study_cli(repo, *report)
    assert again.stdout.splitlines()[1:] == ["no verdict moved (7 claims, every pass, every row)"]
    findings = repo / "reports/study/findings.json"
    written = json.loads(findings.read_text())
    now = written["claim_7"]["exploratory"]["verdict"]
    written["claim_7"]["exploratory"]["verdict"] = "mixed"  # as if an earlier report had read it so
    findings.write_text(json.dumps(written))
    moved = study_cli(repo, *report)
    assert moved.stdout.splitlines()[1:] == [f"claim 7, exploratory: mixed -> {now}"]
