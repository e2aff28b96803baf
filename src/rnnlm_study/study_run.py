"""One run of the study as its folder records it: what it trained and what was measured.

In:  the parsed files of a run folder (`rnnlm_study.folders` reads and checks them).
Out: `StudyRun`, with the run's own params entry and where it trained, for the report's tables,
     figure and judges.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rnnlm.evaluation.blocks import BlockTable


@dataclass(frozen=True)
class StudyRun:
    """One run folder of reports/study/: what it trained and what was measured."""

    model: str
    seed: int
    folder: Path
    quick: bool
    params: dict[str, Any]  # the run's own params.yaml
    train: dict[str, Any]  # train_metrics.json
    metrics: dict[str, Any]  # metrics.json (the evaluate stage's)
    provenance: dict[str, Any]
    epochs: tuple[dict[str, float], ...]  # epochs.tsv's rows, as numbers
    blocks: BlockTable | None = None  # validation_blocks.csv, for runs evaluated since it was written

    @property
    def entry(self) -> dict[str, Any]:
        """The run's own entry of `models:` (cell, tokens, sizes, epochs)."""
        return self.params["models"][self.model]

    @property
    def cell(self) -> str:
        """The entry's cell; for a model of another kind, the kind (`mlp`: as the fixed-window MLP's
        entries first said it, `cell: mlp`)."""
        return self.entry.get("cell") or self.entry["kind"]

    @property
    def tokens(self) -> str:
        return self.entry["tokens"]

    @property
    def training(self) -> str:
        """How the state went through training: "reset" (every window from zeros, the study's recipe)
        or "carried" (`train.state`, the entry's own over the shared one; runs before it: reset)."""
        own = (self.entry.get("train") or {}).get("state")
        return own or (self.params.get("train") or {}).get("state") or "reset"

    @property
    def shape(self) -> tuple:
        """The recurrent stack's sizes (cell, embedding, hidden, layers), to match the two tokenizations."""
        return self.cell, self.entry["embd"], self.entry["hidden"], self.entry["layers"]

    @property
    def steps_scale(self) -> float:
        return float(self.provenance.get("steps_scale", 1.0))

    def where(self) -> str:
        """The device and the processor that trained it ("cpu: AMD EPYC", "cuda: NVIDIA H100 ..."); for a
        run resumed on another machine, each with the epoch it took over at ("cpu: A; cpu: B from epoch 4")."""
        machines = self.provenance.get("machines") or self.train.get("machines") or []
        if len(machines) > 1:
            return "; ".join(f"{m['device']}: {m['processor']}" + (f" from epoch {m['from_epoch']}" if i else "")
                             for i, m in enumerate(machines))
        device = self.provenance.get("device") or self.train.get("device", "?")
        processor = self.provenance.get("processor") or self.train.get("processor")
        return f"{device}: {processor}" if processor else str(device)

    def source(self) -> str:
        p = self.provenance
        if p.get("experiment"):
            return f"experiment {p['experiment']} ({str(p.get('rev', ''))[:7]})"
        if p.get("rev"):
            return f"commit {str(p['rev'])[:7]}"
        if p.get("archive"):  # trained without DVC (a GPU machine), brought in by collect --archives
            return f"archive {p['archive']} ({p.get('run_by', '?')} at {str(p.get('commit', '?'))[:7]})"
        return f"{p.get('made_by', 'unknown')} at {str(p.get('commit', '?'))[:7]}"


def provenance_date(value: object) -> datetime | None:
    """A provenance's `date` (ISO 8601, as collect and gpu_check.py write it) as a datetime; None where
    it is not one."""
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None
