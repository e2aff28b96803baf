"""The validation text as a sample: each scorer's loss summed over fixed blocks of the validation split.

Every interval over seeds treats the validation split as fixed; it is one tail of the corpus, and
neighbouring characters are correlated, so a second text would move every figure a little. The
blocks let the study resample the text too (`rnnlm_study` resamples seeds and blocks jointly).

In:  the characters each validation token spans (its decoded length), and per scorer each predicted
     token's loss in nats (tokens 1 .. n - 1, as `rnnlm.evaluation.scoring` gives them).
Out: a `BlockTable`, one row per block of `BLOCK_CHARS` characters by offset in the split (the last
     one shorter): its first character, the characters and tokens predicted in it and each scorer's
     nats summed over them, in float64; written as CSV (`write_blocks`) beside reports/metrics.json.

A token belongs to the block where its first character falls, so the blocks are the same for every
model of either tokenizer: a SentencePiece piece that straddles a boundary counts whole in the block
it starts in. The sums are extra accumulators: the run's totals in metrics.json are summed as before.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rnnlm.atomic import write_text_atomic

if TYPE_CHECKING:  # the sums use the tensors' own methods: reading a table (the study) needs no PyTorch
    from torch import Tensor

BLOCK_CHARS = 2048
"""Characters per block: long enough that a block's loss is a sum over a few paragraphs of the play
(correlation between neighbouring characters dies out well within it), short enough that the
111,540-character validation split gives 55 blocks to resample."""


@dataclass(frozen=True)
class BlockTable:
    """Per block: its first character's offset, the characters and tokens predicted in it, and each
    scorer's summed nats (name -> (blocks,) float64)."""

    first_char: list[int]
    chars: list[int]
    tokens: list[int]
    nats: dict[str, list[float]]


def token_starts(lengths: Tensor) -> Tensor:
    """Each token's first character's offset in the text: (n,) int64 from the (n,) decoded lengths."""
    return lengths.cumsum(0) - lengths


def block_sums(lengths: Tensor, text_chars: int, losses: dict[str, Tensor]) -> BlockTable:
    """The `BlockTable` of a validation split of `text_chars` characters whose tokens span `lengths`
    characters each ((n,) int64, in order; they must cover the text exactly), with each scorer's loss
    per predicted token (name -> (n - 1,), entry t - 1 for token t). Token 0 is context only."""
    if int(lengths.sum()) != text_chars:
        raise ValueError(f"the tokens span {int(lengths.sum())} characters, not the text's {text_chars}")
    blocks = -(-text_chars // BLOCK_CHARS)
    which = (token_starts(lengths) // BLOCK_CHARS)[1:]  # (n - 1,): the block of each predicted token
    predicted = lengths[1:]

    def summed(values: Tensor) -> Tensor:
        values = values.detach().cpu().double()  # (n - 1,) float64
        return values.new_zeros(blocks).index_add_(0, which, values)  # (blocks,) float64

    return BlockTable(first_char=list(range(0, text_chars, BLOCK_CHARS)),
                      chars=[int(x) for x in summed(predicted).tolist()],
                      tokens=[int(x) for x in summed(predicted.new_ones(predicted.shape)).tolist()],
                      nats={name: summed(values).tolist() for name, values in losses.items()})


def blocks_csv(table: BlockTable) -> str:
    """The table as CSV: block, first_char, chars, tokens, then `<scorer>_nats` per scorer (floats as
    Python writes them, exactly)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["block", "first_char", "chars", "tokens", *(f"{name}_nats" for name in table.nats)])
    for i, first in enumerate(table.first_char):
        writer.writerow([i, first, table.chars[i], table.tokens[i], *(repr(v[i]) for v in table.nats.values())])
    return out.getvalue()


def write_blocks(table: BlockTable, path: str | Path) -> None:
    """reports/validation_blocks.csv, written atomically."""
    write_text_atomic(path, blocks_csv(table))


def read_blocks(text: str) -> BlockTable:
    """A table written by `blocks_csv`, read back; ValueError when it is not one."""
    rows = list(csv.DictReader(text.splitlines()))
    if not rows or [k for k in ("block", "first_char", "chars", "tokens") if k not in rows[0]]:
        raise ValueError("not a table of validation blocks (block, first_char, chars, tokens, <scorer>_nats)")
    names = [k.removesuffix("_nats") for k in rows[0] if k.endswith("_nats")]
    if [int(r["block"]) for r in rows] != list(range(len(rows))):
        raise ValueError("its blocks are not numbered 0, 1, 2, ... in order")
    return BlockTable(first_char=[int(r["first_char"]) for r in rows], chars=[int(r["chars"]) for r in rows],
                      tokens=[int(r["tokens"]) for r in rows],
                      nats={n: [float(r[f"{n}_nats"]) for r in rows] for n in names})
