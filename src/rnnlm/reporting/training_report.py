"""Write a training run's metrics and plots at fixed paths, for `dvc metrics` and `dvc plots`.

In:  the model's name and a `TrainResult` (the run finished) or a `Progress` (the run so far).
Out: in one folder, written atomically and rewritten whole each time:
  metrics.json  the summary (losses in nats per token, time, speed, size, device and processor,
                the GEMM of the products); while the run trains, also `"finished": false` and the
                epochs planned, so that `dvc exp show` lists a queued run's figures as it goes
                and a run killed part-way is never read as finished
  steps.tsv     one row per optimizer step: step, epoch, train_loss, lr, tokens_per_second
  epochs.tsv    one row per epoch: step, epoch, train_loss (mean), val_loss, lr, seconds
"""

from __future__ import annotations

import csv
import io
import json
import os
import statistics
from collections.abc import Mapping
from pathlib import Path

from rnnlm.atomic import atomic_path, write_text_atomic
from rnnlm.training.progress import Progress
from rnnlm.training.record import TrainResult


def _tsv(rows: list[dict[str, float]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), delimiter="\t", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def training_summary(name: str, result: TrainResult | Progress) -> dict[str, object]:
    """The summary of a finished run (`TrainResult`) or of one so far (`Progress`: marked unfinished,
    with the epochs planned; no losses before its first epoch ends)."""
    epochs, steps = result.history.epochs, result.history.steps
    live = {"finished": False, "epochs_planned": result.epochs_planned} if isinstance(result, Progress) else {}
    if not epochs:
        return {"model": name, **live, "epochs": 0, "steps": len(steps)}
    return {
        "model": name,
        "device": result.device,
        "processor": result.processor,
        "gemm": result.gemm,
        "machines": result.machines,
        **({"state": result.state} if result.state != "reset" else {}),  # the study's recipe goes unsaid
        "parameters": result.parameters,
        "epochs": len(epochs),
        "steps": len(result.history.steps),
        "train_loss": epochs[-1]["train_loss"],
        "val_loss": epochs[-1]["val_loss"],
        "best_val_loss": min(row["val_loss"] for row in epochs),
        "seconds": round(result.seconds, 2),
        "tokens_per_second": round(statistics.median(r["tokens_per_second"] for r in result.history.steps)),
        **live,
    }


def write_training_report(out_dir: str | Path, name: str, result: TrainResult | Progress) -> None:
    """Write metrics.json, steps.tsv and epochs.tsv under `out_dir` (a curve with no row yet is left
    out). A finished run's replaces the folder at once; a run's so far (`Progress`) rewrites each
    file through a temporary one and a rename, so that a kill at any moment leaves every file whole
    and the folder in place."""
    files = {"metrics.json": json.dumps(training_summary(name, result), indent=2) + "\n"}
    for file, rows in (("steps.tsv", result.history.steps), ("epochs.tsv", result.history.epochs)):
        if rows:
            files[file] = _tsv(rows)
    if isinstance(result, Progress):
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        for file in ("steps.tsv", "epochs.tsv", "metrics.json"):  # the summary last: it says how far the rest got
            if file in files:
                write_text_atomic(Path(out_dir) / file, files[file])
        return
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        for file, text in files.items():
            (tmp / file).write_text(text)


SIGNAL = Path(".dvc/tmp/exps/run/DVCLIVE_STEP_COMPLETED")
"""Where the VS Code extension for DVC looks for word that a queued experiment has new figures (the
file DVCLive writes, under the repository DVC runs the experiment for: `$DVC_ROOT`)."""


def signal_new_figures(epoch: int, environ: Mapping[str, str] = os.environ) -> None:
    """Tell DVC's VS Code extension that the run has new figures, as DVCLive does (its signal file's
    `step` field, here the epochs finished); nothing outside a DVC run (no `DVC_ROOT`)."""
    root = environ.get("DVC_ROOT")
    if root:
        write_text_atomic(Path(root) / SIGNAL, json.dumps({"pid": os.getpid(), "step": epoch}, sort_keys=True))


def clear_signal(environ: Mapping[str, str] = os.environ) -> None:
    root = environ.get("DVC_ROOT")
    if root:
        (Path(root) / SIGNAL).unlink(missing_ok=True)
