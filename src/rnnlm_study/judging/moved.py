"""What a report changed in the findings: the verdicts that moved between two findings records.

In:  two records of reports/study/findings.json (`rnnlm_study.judging.findings.findings_record`):
     the one a `report` is about to replace (`read_findings`: None when there was none) and the
     one it wrote.
Out: `verdicts_moved` -> one line per change, claim by claim and pass by pass (a later
     registration's too, and the study's conclusion of a claim it judged again): the claim's verdict,
     a row that became judged or waiting, a row's verdict; or one line saying that nothing moved.

Why: each collected run is committed with the report rebuilt, and its note names the verdicts that
moved; read from the two records, that list cannot leave a change out or name one that did not happen.
A row's state is its verdict when the pass judges it, else what it waits for; the figures beside a
verdict (estimates, intervals, p) move with every run and are left to `git diff`.
"""

from __future__ import annotations

import json
from pathlib import Path

from rnnlm_study.judging.findings import CONFIRMATORY, EXPLORATORY

Record = dict[str, object]


def read_findings(path: Path) -> Record | None:
    """The findings record at `path`, or None where there is none or it cannot be read as one (a
    report then has nothing to compare and says so)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def _rows(claim_pass: Record) -> dict[str, str]:
    """Row label -> its state in one claim's pass: its verdict, or what it waits for."""
    rows = {str(c["comparison"]): str(c["verdict"]) for c in claim_pass.get("comparisons", [])}
    rows.update({str(label): str(why) for label, why in claim_pass.get("waiting", {}).items()})
    return rows


def _claims(record: Record) -> list[str]:
    return [key for key in record if key.startswith("claim_")]


def verdicts_moved(before: Record | None, after: Record) -> list[str]:
    """The changes from `before` to `after` (module docstring), in claim and pass order."""
    if before is None:
        return ["no earlier findings.json to compare with: every verdict is new"]
    if before.get("registration") != after.get("registration"):
        return ["the registration changed: verdicts under other rules are not compared"]
    lines: list[str] = []
    for key in _claims(after):
        number = key.split("_", 1)[1]
        for name in _passes(after[key]):
            lines += _moved(f"claim {number}, {name.replace('_', ' ')}", before.get(key, {}).get(name, {}),
                            after[key][name])
        old, new = before.get(key, {}).get("conclusion"), after[key].get("conclusion")
        if new is not None and (old or {}).get("verdict") != new["verdict"]:
            lines.append(f"claim {number}, the study's conclusion: {(old or {}).get('verdict', 'absent')} -> "
                         f"{new['verdict']}")
    return lines or [f"no verdict moved ({len(_claims(after))} claims, every pass, every row)"]


def _passes(claim: Record) -> list[str]:
    """The passes a claim's record holds: exploratory and confirmatory, then each later
    registration's ("registration_2")."""
    return [EXPLORATORY, CONFIRMATORY, *(key for key in claim if key.startswith("registration_"))]


def _moved(where: str, old: Record, new: Record) -> list[str]:
    """What moved in one pass of one claim, named `where`: its verdict, then each row whose state
    changed, appeared or went (`old` is empty when the pass is new)."""
    lines = []
    if old.get("verdict") != new["verdict"]:
        lines.append(f"{where}: {old.get('verdict', 'absent')} -> {new['verdict']}")
    was, now = _rows(old), _rows(new)
    lines += [f"{where}, {row}: {was.get(row, 'absent')} -> {state}"
              for row, state in now.items() if was.get(row) != state]
    lines += [f"{where}, {row}: {state} -> absent" for row, state in was.items() if row not in now]
    return lines
