"""The training report while a run trains: rewritten whole after every save, marked unfinished until
the end (and then exactly today's report), the signal DVC's VS Code extension watches, and a run cut
off part-way never read as finished."""

from __future__ import annotations

import json

import pytest

from rnnlm.reporting.training_report import SIGNAL, clear_signal, signal_new_figures, training_summary, write_training_report
from tests.test_train import Interrupted, _train, tiny_params


def test_the_report_is_rewritten_after_every_epoch_and_marked_until_the_end(raw_params, tmp_path):
    params = tiny_params(raw_params, dropout=0.2)
    seen = []

    def live(progress):
        write_training_report(tmp_path / "train", "astra_alpha", progress)
        seen.append(json.loads((tmp_path / "train/metrics.json").read_text()))

    result = _train(params, on_progress=live)
    assert [(m["epochs"], m["finished"], m["epochs_planned"]) for m in seen] == [(1, False, 3), (2, False, 3),
                                                                                  (3, False, 3)]
    assert [m["val_loss"] for m in seen] == [row["val_loss"] for row in result.history.epochs]
    assert len((tmp_path / "train/epochs.tsv").read_text().splitlines()) == 4
    write_training_report(tmp_path / "train", "astra_alpha", result)
    final = json.loads((tmp_path / "train/metrics.json").read_text())
    assert "finished" not in final and "epochs_planned" not in final  # the finished run's report, as before
    assert final == {**{k: v for k, v in seen[-1].items() if k not in ("finished", "epochs_planned")},
                     "seconds": final["seconds"]}
    assert _train(params).checkpoint.model_state.keys() == result.checkpoint.model_state.keys()


def test_a_report_before_the_first_epoch_ends_has_steps_and_no_losses(raw_params, tmp_path):
    from rnnlm.training.progress import History, Progress

    history = History(steps=[{"step": 1, "epoch": 1, "train_loss": 4.1, "lr": 0.01, "tokens_per_second": 9.0}])
    progress = Progress(history, 0.0, 10, "cpu", "mkl", "a CPU", 1000, [])
    assert training_summary("astra_alpha", progress) == {"model": "astra_alpha", "finished": False,
                                                         "epochs_planned": 10, "epochs": 0, "steps": 1}
    write_training_report(tmp_path / "train", "astra_alpha", progress)
    assert sorted(p.name for p in (tmp_path / "train").iterdir()) == ["metrics.json", "steps.tsv"]


def test_the_signal_is_written_under_dvc_root_and_removed_at_the_end(tmp_path):
    signal_new_figures(3, environ={"DVC_ROOT": str(tmp_path)})
    assert json.loads((tmp_path / SIGNAL).read_text())["step"] == 3
    clear_signal(environ={"DVC_ROOT": str(tmp_path)})
    assert not (tmp_path / SIGNAL).exists()
    signal_new_figures(1, environ={})  # outside a DVC run: nothing
    assert not (tmp_path / ".dvc").exists() or not (tmp_path / SIGNAL).exists()


def test_a_run_cut_off_leaves_its_last_figures_marked_and_collect_refuses_them(raw_params, tmp_path):
    from rnnlm_study.folders import StudyFolderError, load_run
    from tests.study.study_repo import write_run

    params = tiny_params(raw_params, dropout=0.2)
    report = tmp_path / "repo/reports/train"

    def stop_after_second(epoch):
        if epoch == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        _train(params, on_progress=lambda p: write_training_report(report, "astra_alpha", p),
               on_epoch_end=stop_after_second)
    kept = json.loads((report / "metrics.json").read_text())
    assert (kept["finished"], kept["epochs"], kept["epochs_planned"]) == (False, 2, 3)
    folder = tmp_path / "study/alpha/seed-1337"
    write_run(tmp_path / "work", "alpha", 1.0, 2.4)
    folder.mkdir(parents=True)
    for name, path in (("params.yaml", "params.yaml"), ("metrics.json", "reports/metrics.json"),
                       ("epochs.tsv", "reports/train/epochs.tsv"), ("generations.md", "reports/generations.md")):
        (folder / name).write_bytes((tmp_path / "work" / path).read_bytes())
    train = json.loads((tmp_path / "work/reports/train/metrics.json").read_text())
    (folder / "train_metrics.json").write_text(json.dumps({**train, "finished": False, "epochs_planned": 3}))
    (folder / "provenance.json").write_text(json.dumps({"model": "alpha"}))
    with pytest.raises(StudyFolderError, match="train_metrics.json: marks a training that stopped after epoch 2 of 3"):
        load_run(folder, "alpha", 1337, quick=False)
