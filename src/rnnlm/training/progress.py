"""Where a training run stands: what it measured so far (`History`), how far the epoch in progress
got (`EpochProgress`, kept in a resume file) and what its live report shows (`Progress`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class History:
    """What a run measured: one row per optimizer step, one per epoch."""

    steps: list[dict[str, float]] = field(default_factory=list)
    epochs: list[dict[str, float]] = field(default_factory=list)


@dataclass
class EpochProgress:
    """How far the epoch in progress got: its completed steps, their losses, its seconds so far."""

    steps: int = 0
    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True)
class Progress:
    """How far a run in progress has got, for its live training report (`on_progress`): the history
    so far (every step done, every epoch finished) and what `TrainResult` says of where it trains."""

    history: History
    seconds: float  # of training, finished epochs only
    epochs_planned: int
    device: str
    gemm: str
    processor: str
    parameters: int
    machines: list[dict[str, Any]]
    state: str = "reset"
