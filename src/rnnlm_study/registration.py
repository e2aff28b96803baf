"""Registered rules: the study's claims frozen in a file before the data that will test them exists.

A registration is `reports/study/registration-<n>.yaml`: per claim its question, logical form, rows,
rules (edge and unit), sensitivity grid and tests; the family-wise level; which seeds are
confirmatory; how the text is resampled; and, read from git once when it was written, when each
claim's rule was first set and changed and when the data it judges was first committed. The file
is committed once and never edited: a rule change is a new registration (`registration-<n+1>.yaml`,
with its own date). Which registration counts, and which runs came after it, is git's to say
(`rnnlm_study.registration_git`).

In:  a registration file's bytes.
A later registration may judge only some claims again (`scope:`), on seeds of its own: its pass never
pools its seeds with an earlier one's (`rnnlm_study.judging.report`).

Out: `Registration` (the file read and checked, with its sha256), `load_registration`,
     `parse_registration`, `registrations` (the files of a study folder, oldest first).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rnnlm.errors import RnnlmError

FORMS = ("all", "any", "list")
"""A claim's logical form: every part must hold (`all`), one part suffices (`any`), or separate
statements read one by one (`list`, the only form whose verdict may be "mixed")."""

NAME = re.compile(r"^registration-(\d+)\.yaml$")

SEALED = "sealed.tsv"
"""Beside the registrations: file, sha256 and the commit that added it, one line per registration."""


class RegistrationError(RnnlmError):
    """A registration file that is missing, malformed, or edited after it was registered."""


@dataclass(frozen=True)
class RegisteredRule:
    """One rule of a claim: the figure it judges, above an edge or inside a band, its unit and the
    edges (or band half-widths) of its sensitivity grid, in order."""

    name: str
    kind: str  # "above" or "within"
    edge: float  # above: the edge; within: the band's half-width b (inside [-b, +b])
    unit: str
    grid: tuple[float, ...]
    figure: str = ""
    why: str = ""


@dataclass(frozen=True)
class RegisteredClaim:
    number: int
    text: str
    question: str
    form: str
    why_form: str
    rules: dict[str, RegisteredRule]
    confirmatory_rows: tuple[str, ...]  # the rows (models or model pairs) the confirmatory pass judges
    history: dict[str, Any]

    def rule(self, name: str) -> RegisteredRule:
        return self.rules[name]

    def registers_row(self, models: tuple[str, ...]) -> bool:
        """Whether the row of `models` (a model, or two set against each other) is one the claim names
        for its confirmatory pass (`confirmatory_rows`)."""
        return any(set(row.split(" − ")) == set(models) for row in self.confirmatory_rows)


@dataclass(frozen=True)
class Registration:
    path: Path
    number: int
    date: str
    sha256: str
    level: float
    seeds: tuple[int, ...]
    at_least: int
    block_chars: int
    replicates: int
    generator_seed: int
    claims: dict[int, RegisteredClaim]
    raw: dict[str, Any]
    sealed_by: str | None = None  # the commit that added the file (git's, which sealed.tsv must record)
    sealed_date: str | None = None  # that commit's date
    scope: tuple[int, ...] | None = None  # the claims a later registration judges again; None: every claim

    def claim(self, number: int) -> RegisteredClaim:
        return self.claims[number]

    @property
    def name(self) -> str:
        """How the report names it: "registration 2"."""
        return f"registration {self.number}"

    def judges(self, number: int) -> bool:
        """Whether this registration judges claim `number` (a scoped one judges only its `scope`)."""
        return number in (self.claims if self.scope is None else self.scope)

    @property
    def row_models(self) -> frozenset[str]:
        """Every model the rows of the claims it judges name (a row is a model, or two set against
        each other)."""
        return frozenset(model for number, claim in self.claims.items() if self.judges(number)
                         for row in claim.confirmatory_rows for model in row.split(" − "))


def registrations(study_dir: Path) -> list[Path]:
    """The registration files of `study_dir`, oldest first."""
    found = [p for p in study_dir.glob("registration-*.yaml") if NAME.match(p.name)] if study_dir.is_dir() else []
    return sorted(found, key=lambda p: int(NAME.match(p.name).group(1)))


def _need(mapping: Any, key: str, kind: type | tuple[type, ...], where: str, what: str = "") -> Any:
    value = mapping.get(key) if isinstance(mapping, dict) else None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        got = "nothing" if value is None else repr(value)
        raise RegistrationError(f"{where}: {key} is {got}; expected {what or _KIND_WORDS.get(kinds, 'a value')} "
                                "(a registration file written by `python -m rnnlm_study register`)")
    return value


_KIND_WORDS = {(str,): "text", (int,): "a whole number", (int, float): "a number", (float,): "a decimal number",
               (list,): "a list", (dict,): "a mapping"}


def _numbers(values: Any, where: str, what: str) -> tuple[float, ...]:
    if not isinstance(values, list) or not values or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        raise RegistrationError(f"{where}: {values!r}; expected {what}")
    return tuple(float(v) for v in values)


def _rule(name: str, raw: Any, where: str) -> RegisteredRule:
    kind = _need(raw, "kind", str, where)
    if kind not in ("above", "within"):
        raise RegistrationError(f"{where}: kind {kind!r}; expected above or within")
    edge = float(_need(raw, "edge", (int, float), where))
    if not math.isfinite(edge) or (kind == "within" and edge <= 0):
        raise RegistrationError(f"{where}: edge {edge!r}; expected a finite number (a band's half-width above 0)")
    grid = _numbers(raw.get("grid"), f"{where}.grid", "a non-empty list of finite numbers (the sensitivity edges)")
    return RegisteredRule(name, kind, edge, _need(raw, "unit", str, where), grid, str(raw.get("figure", "")),
                          str(raw.get("why", "")))


def _commit_and_date(value: Any, where: str) -> dict[str, str]:
    if not (isinstance(value, dict) and isinstance(value.get("commit"), str) and isinstance(value.get("date"), str)):
        raise RegistrationError(f"{where}: {value!r}; expected {{commit: '<hash>', date: '<ISO date>'}}, as "
                                "`register` writes it")
    return value


def _history(raw: Any, where: str) -> dict[int, dict[str, Any]]:
    """`history:` per claim: when its rule was set (a list of commits and dates) and when its data was
    first committed (one, or null), checked for the shape `write_registration` gives it."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RegistrationError(f"{where}: history is {raw!r}; expected a mapping of claim numbers, as `register` "
                                "writes it")
    history = {}
    for number, entry in raw.items():
        at = f"{where}: history.{number}"
        if not isinstance(number, int) or isinstance(number, bool) or not isinstance(entry, dict):
            raise RegistrationError(f"{at}: expected a claim number with a mapping of rule_set and data_first_committed")
        rules = entry.get("rule_set") or []
        if not isinstance(rules, list):
            raise RegistrationError(f"{at}.rule_set: {rules!r}; expected a list of commits and dates")
        for k, rule in enumerate(rules):
            _commit_and_date(rule, f"{at}.rule_set[{k}]")
        if entry.get("data_first_committed") is not None:
            _commit_and_date(entry["data_first_committed"], f"{at}.data_first_committed")
        history[number] = entry
    return history


def _claim(number: Any, entry: Any, at: str, history: dict[str, Any]) -> RegisteredClaim:
    """The registered claim `number` from its `entry` (`at` says where, for errors), with its
    `history`: a whole number, a known form, its rules and the rows it registers; else
    RegistrationError naming the field."""
    if not isinstance(number, int) or isinstance(number, bool):
        raise RegistrationError(f"{at}: expected claims numbered 1, 2, ...")
    form = _need(entry, "form", str, at)
    if form not in FORMS:
        raise RegistrationError(f"{at}: form {form!r}; expected one of {', '.join(FORMS)}")
    rules = {name: _rule(name, rule, f"{at}.rules.{name}") for name, rule in _need(entry, "rules", dict, at).items()}
    rows = entry.get("confirmatory_rows") or []
    if not isinstance(rows, list) or not all(isinstance(r, str) for r in rows):
        raise RegistrationError(f"{at}.confirmatory_rows: {rows!r}; expected a list of rows (models or pairs)")
    return RegisteredClaim(number, _need(entry, "text", str, at), _need(entry, "question", str, at), form,
                           _need(entry, "why_form", str, at), rules, tuple(rows), history)


def parse_registration(data: bytes, path: Path) -> Registration:
    """The registration whose bytes are `data` (read from `path`, or from git), checked: every field
    of the kind `write_registration` writes, numbers where numbers go, a level in (0, 1); else a
    RegistrationError naming the field."""
    try:
        raw = yaml.safe_load(data)
    except yaml.YAMLError as error:
        raise RegistrationError(f"{path}: does not parse ({str(error).splitlines()[0]})") from None
    where = str(path)
    if not isinstance(raw, dict):
        raise RegistrationError(f"{where}: holds no mapping of fields; expected a registration file written by "
                                "`python -m rnnlm_study register`")
    level = _need(raw, "level", (int, float), where)
    if not 0 < level < 1:
        raise RegistrationError(f"{where}: level {level!r}; expected a family-wise error level in (0, 1)")
    confirmatory, text = _need(raw, "confirmatory", dict, where), _need(raw, "text_sample", dict, where)
    seeds = _need(confirmatory, "seeds", list, f"{where}: confirmatory")
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise RegistrationError(f"{where}: confirmatory.seeds {seeds!r}; expected a list of seeds (whole numbers)")
    counts = {key: _need(mapping, key, int, f"{where}: {section}", "a whole number above 0")
              for section, mapping, key in (("confirmatory", confirmatory, "at_least"), ("text_sample", text, "block_chars"),
                                            ("text_sample", text, "replicates"))}
    if min(counts.values()) < 1:
        raise RegistrationError(f"{where}: {', '.join(f'{k} {v}' for k, v in counts.items())}; expected whole "
                                "numbers above 0")
    history = _history(raw.get("history"), where)
    claims = {number: _claim(number, entry, f"{where}: claims.{number}", history.get(number) or {})
              for number, entry in _need(raw, "claims", dict, where).items()}
    return Registration(path, _need(raw, "registration", int, where), str(_need(raw, "date", str, where)),
                        hashlib.sha256(data).hexdigest(), float(level), tuple(seeds), counts["at_least"],
                        counts["block_chars"], counts["replicates"],
                        _need(text, "generator_seed", int, f"{where}: text_sample"), claims, raw,
                        scope=_scope(raw.get("scope"), claims, where))


def _scope(raw: Any, claims: dict[int, RegisteredClaim], where: str) -> tuple[int, ...] | None:
    """`scope:` of a later registration: the claims it judges again, each one it registers and with
    the rows it judges; None (every claim) when the file has none."""
    if raw is None:
        return None
    if not isinstance(raw, list) or not raw or not all(isinstance(n, int) and not isinstance(n, bool) for n in raw):
        raise RegistrationError(f"{where}: scope is {raw!r}; expected a list of the claim numbers it judges")
    for number in raw:
        if number not in claims or not claims[number].confirmatory_rows:
            raise RegistrationError(f"{where}: scope names claim {number}, which it does not register with its "
                                    "confirmatory_rows; expected each claim it judges under claims:")
    return tuple(raw)


def load_registration(path: Path) -> Registration:
    """The registration at `path`, read and checked; RegistrationError naming what is wrong."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RegistrationError(f"{path}: cannot be read ({error.strerror or error})") from None
    return parse_registration(data, path)
