"""The study report from hand-made experiment records, and the commands `study run` queues."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rnnlm import study as study_command
from rnnlm.reporting import study
from rnnlm.errors import RnnlmError

RESET_POINTS = ("1", "2", "4", "8", "16", "32", "64", "128", "256", "512", "1024", "never")
CURVE = dict(zip(RESET_POINTS, [3.8, 3.4, 3.0, 2.7, 2.6, 2.5, 2.45, 2.42, 2.41, 2.40, 2.40, 2.40]))


def _record(model, scale, stateful, *, experiment=None, rev="abc1234", typ="baseline", state=None, seconds=100.0):
    """One row as `dvc.api.exp_show` gives it (the keys that matter here)."""
    row = {
        "Experiment": experiment, "rev": rev, "typ": typ, "State": state,
        "params.yaml:model": model, "train.steps_scale": scale, "tokens": "char",
        "parameters": 1000, "steps": 20, "device": "cpu", "seconds": seconds, "val_loss": 1.7,
        "stateful_bpc": stateful, "stateless_bpc": 3.75, "bigram_bpc": 3.59, "context_horizon": 16,
        "text.stateless.known_word_share": 0.4, "text.stateful.known_word_share": 0.8,
        "text.stateless.repeated_4gram_share": 0.2, "text.stateful.repeated_4gram_share": 0.1,
    }
    row.update({f"reset_curve_bpc.{k}": v for k, v in CURVE.items()})
    return row


def _records():
    """exp_show order: workspace, then each commit newest first followed by its experiments."""
    return pd.DataFrame([
        _record("alpha", 1.0, 2.39, rev="workspace"),
        _record("alpha", 1.0, 2.39, rev="main"),  # HEAD commit: alpha's old committed numbers
        _record("alpha", 1.0, 2.40, experiment="new-alpha", rev="1111111", typ="branch_commit", state="Success"),
        _record("beta", 0.01, 3.81, experiment="quick-beta", rev="2222222", typ="branch_commit", state="Success"),
        _record("beta", 0.01, None, experiment="running-beta", rev="3333333", typ="branch_commit", state="Running"),
        _record("gamma", 0.01, 9.99, experiment="broken", rev="4444444", typ="branch_commit", state="Failed"),
        _record("beta", 0.01, 3.90, rev="0ld0ld0"),  # an older commit: older than quick-beta
    ])


def test_rows_keep_the_newest_finished_run_and_list_missing_models():
    rows = study.study_rows(_records(), ["alpha", "beta", "gamma", "delta"])
    assert list(rows["model"]) == ["alpha", "beta", "gamma", "delta"]
    alpha, beta, gamma, delta = (rows.iloc[i] for i in range(4))
    assert alpha["stateful_bpc"] == 2.40 and alpha["source"] == "new-alpha (1111111)"  # not its commit
    assert beta["stateful_bpc"] == 3.81 and beta["source"] == "quick-beta (2222222)"  # not running, not older
    assert gamma["source"] == study.MISSING  # its only run failed
    assert delta["source"] == study.MISSING and math.isnan(delta["stateful_bpc"])
    assert beta["reset_1"] == 3.8 and beta["reset_never"] == 2.40


def test_one_model_at_two_scales_gives_two_rows():
    records = pd.concat([_records(), pd.DataFrame([_record("alpha", 0.01, 3.0, experiment="quick-alpha",
                                                               rev="5555555", typ="branch_commit", state="Success")])])
    rows = study.study_rows(records, ["alpha"])
    # models that params.yaml no longer lists still show, after the listed ones
    assert list(zip(rows["model"], rows["steps_scale"])) == [("alpha", 0.01), ("alpha", 1.0), ("beta", 0.01)]


def test_markdown_shows_missing_as_missing_not_zero():
    text = study.to_markdown(study.study_rows(_records(), ["alpha", "beta", "delta"]))
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert "not run yet" in lines["delta"] and " 0 " not in lines["delta"] and "—" in lines["delta"]
    assert "**2.400**" in lines["alpha"] and "new-alpha (1111111)" in lines["alpha"]
    assert "20 (1)" in lines["alpha"] and "3.750" in lines["alpha"] and "0.40 / 0.80" in lines["alpha"]


def test_figure_is_a_png(tmp_path):
    path = tmp_path / "study.png"
    study.write_figure(study.study_rows(_records(), ["alpha", "beta", "delta"]), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["study.png"]  # no temporary file left behind


def test_queue_commands_set_model_and_scale():
    assert study.queue_commands(["astra_beta", "leviathan"], 0.01) == [
        ["dvc", "exp", "run", "--queue", "-S", "model=astra_beta", "-S", "train.steps_scale=0.01"],
        ["dvc", "exp", "run", "--queue", "-S", "model=leviathan", "-S", "train.steps_scale=0.01"],
    ]


def test_unknown_model_and_bad_scale_are_refused_before_anything_is_queued(tmp_path, monkeypatch):
    from tests.conftest import REPO_ROOT

    calls = []
    monkeypatch.setattr(study, "_dvc", lambda command: calls.append(command) or "")
    with pytest.raises(RnnlmError, match="--models nosuch: not under models:"):
        study.run(["astra_alpha", "nosuch"], 1.0, wait=False, params_path=str(REPO_ROOT / "params.yaml"))
    with pytest.raises(RnnlmError, match="--steps-scale 0: expected a finite positive number"):
        study_command.main(["run", "--steps-scale", "0", "--params", str(REPO_ROOT / "params.yaml")])
    assert calls == []


def test_context_curves_become_each_runs_excess_over_its_carried_state(tmp_path):
    records = _records()
    records["context_carried_bpc"] = "2.0"  # exp_show gives strings for some columns
    records["context_curve_bpc.1"] = "3.0"
    records["context_curve_bpc.8"] = "2.02"
    assert study.context_lengths(records) == [1, 8]
    rows = study.study_rows(records, ["alpha", "beta"])
    assert rows.iloc[0]["context_1"] == 0.5 and rows.iloc[0]["context_8"] == pytest.approx(0.01)
    study.write_figure(rows, tmp_path / "study.png")
    assert (tmp_path / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
