"""One tokenizer per model: which SentencePiece runs were tokenized by another SentencePiece.

In:  each SentencePiece run's number of validation pieces (any key per run: `collect` labels them,
     the report keys them by (model, seed)).
Out: the runs whose count is not the usual one, each with why. The usual count is the one most runs
     share (the pipeline's pinned tokenizer; on a tie the smaller count): a tokenizer trained by
     another SentencePiece build cuts the same validation text into another number of pieces.
     `other_tokenizer_folders` reads the counts from a study folder's collected runs, for `collect`
     (which says so of a run it takes), `run` (which trains such a run again) and `status`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import TypeVar

from rnnlm_study.folders import folder_seed

Key = TypeVar("Key", bound=Hashable)


def other_tokenizer_runs(pieces: Mapping[Key, int]) -> dict[Key, str]:
    """The runs of `pieces` (run -> validation pieces) off the usual count, each with why."""
    counts = Counter(pieces.values())
    if not counts:
        return {}
    usual = min(counts, key=lambda n: (-counts[n], n))
    return {run: f"another tokenizer ({n:,} validation pieces against {usual:,})"
            for run, n in pieces.items() if n != usual}


def other_tokenizer_folders(study_dir: Path) -> dict[tuple[str, int], str]:
    """The full-scale SentencePiece runs collected under `study_dir` (`<model>/seed-<seed>/metrics.json`,
    its `tokens` and `val_tokens`) off the usual count: (model, seed) -> why. Folders not named
    seed-<seed>, and metrics that do not parse or lack the count, are skipped."""
    pieces: dict[tuple[str, int], int] = {}
    for path in sorted(study_dir.glob("*/seed-*/metrics.json")):
        try:
            metrics = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        seed = folder_seed(path.parent)
        if seed is not None and isinstance(metrics, dict) and metrics.get("tokens") == "sentencepiece" and \
                isinstance(metrics.get("val_tokens"), int):
            pieces[(path.parent.parent.name, seed)] = metrics["val_tokens"]
    return other_tokenizer_runs(pieces)
