"""One tokenizer per model: which SentencePiece runs were tokenized by another SentencePiece.

In:  each SentencePiece run's number of validation pieces (any key per run: `collect` labels them,
     the report keys them by (model, seed)).
Out: the runs whose count is not the usual one, each with why. The usual count is the one most runs
     share (the pipeline's pinned tokenizer; on a tie the smaller count): a tokenizer trained by
     another SentencePiece build cuts the same validation text into another number of pieces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)


def other_tokenizer_runs(pieces: Mapping[Key, int]) -> dict[Key, str]:
    """The runs of `pieces` (run -> validation pieces) off the usual count, each with why."""
    counts = Counter(pieces.values())
    if not counts:
        return {}
    usual = min(counts, key=lambda n: (-counts[n], n))
    return {run: f"another tokenizer ({n:,} validation pieces against {usual:,})"
            for run, n in pieces.items() if n != usual}
