"""Write a training run's metrics and plots at fixed paths, for `dvc metrics` and `dvc plots`.

In:  the model's name and a `TrainResult`.
Out: in one folder, written atomically and rewritten whole each time:
  metrics.json  the final summary (losses in nats per token, time, speed, size, device and
                processor, the GEMM of the products)
  steps.tsv     one row per optimizer step: step, epoch, train_loss, lr, tokens_per_second
  epochs.tsv    one row per epoch: step, epoch, train_loss (mean), val_loss, lr, seconds
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from pathlib import Path

from rnnlm.atomic import atomic_path
from rnnlm.training.train import TrainResult


def _tsv(rows: list[dict[str, float]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), delimiter="\t", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def training_summary(name: str, result: TrainResult) -> dict[str, object]:
    epochs = result.history.epochs
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
    }


def write_training_report(out_dir: str | Path, name: str, result: TrainResult) -> None:
    """Write metrics.json, steps.tsv and epochs.tsv under `out_dir`, replacing the folder at once."""
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        (tmp / "metrics.json").write_text(json.dumps(training_summary(name, result), indent=2) + "\n")
        (tmp / "steps.tsv").write_text(_tsv(result.history.steps))
        (tmp / "epochs.tsv").write_text(_tsv(result.history.epochs))
