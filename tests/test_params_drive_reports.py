"""What is drawn and reported follows `evaluate.*`: a run with another n-gram order and other reset
intervals goes through the evaluate, report and study-report code end to end, and every plot column
dvc.yaml names exists, with no empty cells."""

from __future__ import annotations

import csv
import json
import shutil

import yaml

from rnnlm.data.corpus import character_vocabulary, split_corpus
from rnnlm.evaluation.evaluate import evaluate, write_metrics, write_reset_curve
from rnnlm.models.checkpoint import load_checkpoint
from rnnlm.params import parse_params
from rnnlm_study.judging import report as study_report
from rnnlm_study.judging.figure import _reset_curve
from rnnlm.reporting.generation_markdown import to_markdown
from rnnlm.inference.generation import run_generations
from tests.study.study_repo import study_in_git
from tests.conftest import REPO_ROOT, synthetic_play

RESET_EVERY = [1, 4, 16]


def _plot_columns() -> list[str]:
    dvc = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text(encoding="utf-8"))
    plot = next(p["reset_curve"] for p in dvc["plots"] if "reset_curve" in p)
    return [plot["x"], *plot["y"]["reports/plots/reset_curve.csv"]]


def test_another_ngram_order_and_other_reset_intervals_flow_through_every_report(raw_params, char_checkpoint,
                                                                                  tmp_path):
    raw_params["evaluate"].update({"ngram_max_order": 3, "reset_every": RESET_EVERY, "context_lengths": [1, 2, 4],
                                   "context_targets": 200})
    raw_params["generate"].update({"max_new_tokens": 20, "prompts": ["ROMEO: "]})
    params = parse_params(raw_params)
    text = synthetic_play(20_000)
    split = split_corpus(text, 0.9)
    assert character_vocabulary(text)  # the checkpoint's tokenizer was made from the same play
    checkpoint = load_checkpoint(char_checkpoint)
    generations = run_generations(checkpoint, char_checkpoint, params.generate, params.seed)
    metrics, curve, _, _ = evaluate(checkpoint, split.train, split.val, generations, params.evaluate, params.seed)

    # metrics.json: exactly the orders and intervals asked for
    assert list(metrics["ngram_bpc"]) == ["unigram", "bigram", "trigram"]
    assert list(metrics["reset_curve_bpc"]) == ["1", "4", "16", "never"]
    write_metrics(metrics, tmp_path / "metrics.json")

    # the reset-curve CSV has every column dvc.yaml plots, filled, one row per interval
    write_reset_curve(curve, metrics, tmp_path / "reset_curve.csv")
    with open(tmp_path / "reset_curve.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["k"]) for r in rows] == RESET_EVERY
    for column in _plot_columns():
        assert all(r.get(column) not in (None, "") for r in rows), column
    assert float(rows[0]["ngram_bpc"]) == metrics["ngram_bpc"]["trigram"]

    # the generation report names the scorer's order, never the default one
    report = to_markdown(generations, json.loads((tmp_path / "metrics.json").read_text()))
    assert "under the count trigram" in report and "5-gram" not in report
    assert "| k | 1 | 4 | 16 | never |" in report

    # the study report reads the intervals the run measured
    folder = tmp_path / f"study/astra_alpha/seed-{params.seed}"
    folder.mkdir(parents=True)
    write_metrics(metrics, folder / "metrics.json")
    (folder / "train_metrics.json").write_text(json.dumps({"model": "astra_alpha", "device": "cpu", "steps": 10,
                                                           "epochs": 1, "val_loss": 1.5, "parameters": 86913,
                                                           "seconds": 1.0}))
    (folder / "epochs.tsv").write_text("step\tepoch\ttrain_loss\tval_loss\n10\t1\t1.6\t1.5\n")
    shutil.copy(REPO_ROOT / "params.yaml", folder / "params.yaml")
    (folder / "generations.md").write_text(report)
    (folder / "provenance.json").write_text(json.dumps({"model": "astra_alpha", "steps_scale": 1.0, "rev": "0" * 40}))
    shutil.copy(REPO_ROOT / "reports/study/registration-1.yaml", tmp_path / "study")
    study_in_git(tmp_path, "study")
    runs = study_report.report(tmp_path / "study", tmp_path / "study.md", tmp_path / "study.png",
                               str(REPO_ROOT / "params.yaml"))
    assert list(_reset_curve(runs[0])) == ["1", "4", "16", "never"]
    assert (tmp_path / "study.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"| [astra_alpha](study/astra_alpha/seed-{params.seed}/generations.md) |" in (tmp_path / "study.md").read_text()
