"""The GEMM table: for each CPU model met so far, the float32 GEMM library ("mkl" or "onednn") of
each kind of product (large, narrow, one row), chosen from figures timed on that CPU model.

In:  gemm_table.json beside this module: one row per CPU model (`rnnlm.compute.cpu.cpu_kind`),
     written by `benchmarks/gemm_table.py --write` on that CPU, or by hand from another report's
     figures (the row's `source` then says where they come from and `measured` is false).
Out: `row_for(kind)`, the `Row` of a CPU model, None where the table has none; `load_table()`,
     every row; `dumps(rows)`, the table's text (what the benchmark writes).

Each kind of product records the figures it was chosen from (one per library, in milliseconds or
GFLOP/s) and what they timed; a row whose library is not the faster one of its own figures is
refused when the table loads. A kind without figures (a report that timed only some kinds) keeps
the vendor rule's library, and says so. The table is read, never timed, at run time: the same CPU
model always gets the same libraries, so its runs repeat bit for bit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from rnnlm.errors import RnnlmError

TABLE = Path(__file__).with_name("gemm_table.json")
LIBRARIES = ("mkl", "onednn")
KINDS = ("large", "narrow", "one_row")
FASTER = {"ms": min, "GFLOP/s": max}
"""How the faster library is read from a kind's figures, per unit."""


@dataclass(frozen=True)
class KindChoice:
    """One kind of product on one CPU model: its library and the figures it was chosen from."""

    library: str
    unit: str  # a key of FASTER, or "" where there are no figures
    figures: dict[str, float]  # library -> its figure in `unit`; empty where this kind was not timed
    timed: str  # what the figures time, or why there are none

    def faster(self) -> str | None:
        """The library the figures favour (None without figures)."""
        return FASTER[self.unit](self.figures, key=self.figures.get) if self.figures else None


@dataclass(frozen=True)
class Row:
    """One CPU model's libraries, with where their figures come from."""

    cpu: str  # vendor, family and model ("AuthenticAMD family 25 model 17")
    name: str  # what a reader calls it ("AMD EPYC, Zen 4")
    measured: bool  # timed on this CPU model by benchmarks/gemm_table.py (False: figures taken from elsewhere)
    source: str  # the benchmark run or the report its figures come from
    kinds: dict[str, KindChoice]  # a key per KINDS

    @property
    def libraries(self) -> tuple[str, str, str]:
        """The library of each kind, in KINDS' order (large, narrow, one row)."""
        return tuple(self.kinds[kind].library for kind in KINDS)


def parse_table(text: str, where: str) -> dict[str, Row]:
    """The rows of a table's JSON `text` (`where` names it in errors), each checked: a known
    library per kind, figures in a known unit for both libraries, and the faster one chosen."""
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as error:
        raise RnnlmError(f"{where}: not JSON ({error}); expected the GEMM table "
                         "(benchmarks/gemm_table.py --write writes it)") from None
    if not isinstance(entries, dict):
        raise RnnlmError(f"{where}: expected an object of CPU models, found {type(entries).__name__}")
    return {cpu: _row(cpu, entry, where) for cpu, entry in entries.items()}


def _row(cpu: str, entry: object, where: str) -> Row:
    fields = {"name", "measured", "source", *KINDS}
    if not isinstance(entry, dict) or set(entry) != fields:
        found = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
        raise RnnlmError(f"{where}: row {cpu!r} has {found}; expected the fields {sorted(fields)}")
    kinds = {kind: _kind(cpu, kind, entry[kind], where) for kind in KINDS}
    return Row(cpu, str(entry["name"]), bool(entry["measured"]), str(entry["source"]), kinds)


def _kind(cpu: str, kind: str, entry: object, where: str) -> KindChoice:
    what = f"{where}: row {cpu!r}, {kind}"
    if not isinstance(entry, dict) or set(entry) != {"library", "unit", "figures", "timed"}:
        raise RnnlmError(f"{what}: expected the fields library, unit, figures and timed")
    choice = KindChoice(entry["library"], entry["unit"], dict(entry["figures"]), str(entry["timed"]))
    if choice.library not in LIBRARIES:
        raise RnnlmError(f"{what}: library {choice.library!r}; expected one of {', '.join(LIBRARIES)}")
    if choice.figures:
        if choice.unit not in FASTER or set(choice.figures) != set(LIBRARIES):
            raise RnnlmError(f"{what}: figures {choice.figures} in {choice.unit!r}; expected one figure per library "
                             f"({', '.join(LIBRARIES)}) in {' or '.join(FASTER)}")
        if choice.faster() != choice.library:
            raise RnnlmError(f"{what}: library {choice.library!r}, but its figures {choice.figures} ({choice.unit}) "
                             f"favour {choice.faster()!r}; expected the faster one")
    return choice


def entry(row: Row) -> dict:
    """`row` as the table's JSON holds it (keyed by its CPU model there)."""
    return {"name": row.name, "measured": row.measured, "source": row.source,
            **{kind: {"library": c.library, "unit": c.unit, "figures": c.figures, "timed": c.timed}
               for kind, c in row.kinds.items()}}


def dumps(rows: dict[str, Row]) -> str:
    """The table's JSON text for `rows`, sorted by CPU model (what `parse_table` reads back)."""
    return json.dumps({cpu: entry(row) for cpu, row in sorted(rows.items())}, indent=2) + "\n"


@cache
def load_table(path: Path = TABLE) -> dict[str, Row]:
    """Every row of the table at `path` (the committed one by default), read once per process."""
    return parse_table(path.read_text(encoding="utf-8"), str(path))


def row_for(cpu_kind: str) -> Row | None:
    """The committed row of the CPU model `cpu_kind`, None where the table has none (or it is "")."""
    return load_table().get(cpu_kind) if cpu_kind else None
