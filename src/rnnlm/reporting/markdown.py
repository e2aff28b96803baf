"""Markdown tables, written one way for every report (runs, the study, the benchmarks).

    table_head(["model", "n", "stateful"], "lrr") -> ["| model | n | stateful |", "|---|---:|---:|"]
    table_row(["astra_alpha", "5", "2.398"])       -> "| astra_alpha | 5 | 2.398 |"
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

ALIGN = {"l": "---", "r": "---:"}


def table_row(cells: Iterable[object]) -> str:
    """One table row of already formatted cells."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table_head(columns: Sequence[str], align: str) -> list[str]:
    """The header and the alignment line; `align` has one letter per column: l (left) or r (right)."""
    if len(align) != len(columns) or set(align) - ALIGN.keys():
        raise ValueError(f"align {align!r}: expected one of l/r for each of the {len(columns)} columns")
    return [table_row(columns), "|" + "|".join(ALIGN[a] for a in align) + "|"]
