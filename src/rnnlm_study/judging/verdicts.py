"""Verdicts as values: what a row's test decided, and what a claim's rows decide by its logical form.

A row is *supported* or *contradicted* when its test clears the rule's edge on one side, else
*inconclusive at n = k* (k its runs), or *not measured* (no runs). A claim's verdict follows its
registered form (`rnnlm_study.registration.FORMS`):

- `all`: every part must hold: contradicted when any row is, supported when every row is;
- `any`: one part suffices: supported when any row is, contradicted when every row is;
- `list`: separate statements: supported or contradicted when every row is, *mixed* when some are
  each (the only form that may read mixed);

else inconclusive at the smallest n that left a row open. Rows not measured are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    word: str  # supported, contradicted, inconclusive, mixed, not measured yet
    n: int | None = None  # for inconclusive: the runs that left it open

    def __str__(self) -> str:
        return f"{self.word} at n = {self.n}" if self.n is not None else self.word

    @property
    def decided(self) -> bool:
        return self in (SUPPORTED, CONTRADICTED)

    @property
    def code(self) -> int:
        """For `dvc metrics diff`: 1 supported, -1 contradicted, 0 otherwise."""
        return 1 if self == SUPPORTED else -1 if self == CONTRADICTED else 0


SUPPORTED, CONTRADICTED, MIXED, NOT_MEASURED = (Verdict("supported"), Verdict("contradicted"), Verdict("mixed"),
                                                Verdict("not measured yet"))


def inconclusive(n: int) -> Verdict:
    return Verdict("inconclusive", n)


def by_form(verdicts: Sequence[Verdict], form: str) -> Verdict:
    """A claim's verdict from its rows' by its logical form (module docstring)."""
    measured = [v for v in verdicts if v != NOT_MEASURED]
    if not measured:
        return NOT_MEASURED
    supported, contradicted = measured.count(SUPPORTED), measured.count(CONTRADICTED)
    if form == "all" and contradicted or supported == len(measured) or form == "any" and supported:
        return CONTRADICTED if form == "all" and contradicted else SUPPORTED
    if contradicted == len(measured):
        return CONTRADICTED
    if form == "list" and supported and contradicted:
        return MIXED
    return inconclusive(min(v.n for v in measured if not v.decided))
