"""Registered rules: the study's claims frozen in a file before the data that will test them exists.

A registration is `reports/study/registration-<n>.yaml`: per claim its question, logical form, rows,
rules (edge and unit), sensitivity grid and tests; the family-wise level; which seeds are
confirmatory; how the text is resampled; and, read from git once when it was written, when each
claim's rule was first set and changed and when the data it judges was first committed. The file
is committed once and never edited: a rule change is a new registration (`registration-<n+1>.yaml`,
with its own date), and `registering_commit` refuses a file that git shows changed after the commit
that added it, or that the working copy holds otherwise.

What counts is read from git alone (`current_registration`): every registration file committed,
each as the bytes of the one commit that added it, and reports/study/sealed.tsv (`seal`, written by
`python -m rnnlm.study register --seal FILE` after that commit) recording each with those bytes'
sha256 and that commit, as git does; an edit, an uncommitted registration or a sealed.tsv that
disagrees is refused. A run is *confirmatory* for a registration when its seed is one the
registration names and the commit its provenance records, which git must hold, descends from the
commit that added it (`trained_after`, asked of git by the report). `collect` also writes that
answer into the run's provenance (`code_record`), for a reader of the folder; the report holds it
to git and refuses a folder whose record git does not bear out.

In:  the registration files under reports/study/, sealed.tsv, and git.
Out: `Registration` (the file read and checked, with its sha256 and the commit that added it),
     `current_registration`, `registering_commit`, `descends_from`, `trained_after`;
     `write_registration` fills a draft's history from git and writes the file; `seal` records its
     commit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rnnlm.atomic import write_text_atomic
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

    def claim(self, number: int) -> RegisteredClaim:
        return self.claims[number]


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
                                "(a registration file written by `python -m rnnlm.study register`)")
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
                                "`python -m rnnlm.study register`")
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
    claims = {}
    for number, entry in _need(raw, "claims", dict, where).items():
        at = f"{where}: claims.{number}"
        if not isinstance(number, int) or isinstance(number, bool):
            raise RegistrationError(f"{at}: expected claims numbered 1, 2, ...")
        form = _need(entry, "form", str, at)
        if form not in FORMS:
            raise RegistrationError(f"{at}: form {form!r}; expected one of {', '.join(FORMS)}")
        rules = {name: _rule(name, rule, f"{at}.rules.{name}") for name, rule in _need(entry, "rules", dict, at).items()}
        rows = entry.get("confirmatory_rows") or []
        if not isinstance(rows, list) or not all(isinstance(r, str) for r in rows):
            raise RegistrationError(f"{at}.confirmatory_rows: {rows!r}; expected a list of rows (models or pairs)")
        claims[number] = RegisteredClaim(number, _need(entry, "text", str, at), _need(entry, "question", str, at),
                                         form, _need(entry, "why_form", str, at), rules, tuple(rows),
                                         history.get(number) or {})
    return Registration(path, _need(raw, "registration", int, where), str(_need(raw, "date", str, where)),
                        hashlib.sha256(data).hexdigest(), float(level), tuple(seeds), counts["at_least"],
                        counts["block_chars"], counts["replicates"],
                        _need(text, "generator_seed", int, f"{where}: text_sample"), claims, raw)


def load_registration(path: Path) -> Registration:
    """The registration at `path`, read and checked; RegistrationError naming what is wrong."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise RegistrationError(f"{path}: cannot be read ({error.strerror or error})") from None
    return parse_registration(data, path)


def sealed(study_dir: Path) -> dict[str, tuple[str, str]]:
    """sealed.tsv of `study_dir`: registration file name -> (its sha256, the commit that added it)."""
    path = study_dir / SEALED
    if not path.is_file():
        return {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise RegistrationError(f"{path}: cannot be read ({why}); expected lines of file, sha256, commit and date, "
                                "tab-separated") from None
    rows = [line.split("\t") for line in lines[1:] if line.strip()]
    if not lines or lines[0].split("\t") != ["file", "sha256", "commit", "date"] or any(len(row) != 4 for row in rows):
        raise RegistrationError(f"{path}: expected a header line, then lines of file, sha256, commit and date, "
                                "tab-separated")
    return {name: (digest, commit) for name, digest, commit, _ in rows}


def repository_of(folder: Path) -> Path:
    """The root of the git repository that holds `folder`; RegistrationError when none does."""
    done = _git(folder, "rev-parse", "--show-toplevel") if folder.is_dir() else None
    if done is None or done.returncode != 0:
        raise RegistrationError(f"{folder}: not inside a git repository; expected a clone of the study's repository "
                                "(what is registered, and which runs came after it, is read from git)")
    return Path(done.stdout.strip())


def _committed_registrations(repo: Path, study_dir: Path) -> set[str]:
    """The registration files that HEAD's tree holds in `study_dir`."""
    relative = study_dir.resolve().relative_to(repo.resolve()).as_posix()
    done = _git(repo, "ls-tree", "--name-only", "HEAD", "--", f"{relative}/")
    return {Path(line).name for line in done.stdout.splitlines() if NAME.match(Path(line).name)}


def current_registration(study_dir: Path) -> Registration:
    """The study's registration as git holds it: every registration-<n>.yaml of `study_dir` committed
    (none only in the working copy, none deleted from it), each as the bytes of the one commit that
    added it, and sealed.tsv recording each with those bytes' sha256 and that commit. The newest is
    returned, read from git, with that commit (`sealed_by`); anything else is a RegistrationError,
    since the verdicts turn on which rules count and from when."""
    repo = repository_of(study_dir)
    here = {p.name for p in registrations(study_dir)}
    committed = _committed_registrations(repo, study_dir)
    for name in sorted(here - committed):
        raise RegistrationError(f"{study_dir / name}: not committed; a registration counts from the commit that adds "
                                "it (commit it, then `python -m rnnlm.study register --seal`), or remove it")
    for name in sorted(committed - here):
        raise RegistrationError(f"{study_dir / name}: committed but missing here; expected the registered file "
                                f"(`git checkout -- {study_dir / name}`)")
    if not here:
        raise RegistrationError(f"{study_dir}: no registration-<n>.yaml; expected the study's registered rules")
    table, registration = sealed(study_dir), None
    for path in registrations(study_dir):
        commit = registering_commit(repo, path)
        relative = path.resolve().relative_to(repo.resolve()).as_posix()
        data = subprocess.run(["git", "show", f"{commit}:{relative}"], cwd=repo, capture_output=True).stdout
        registration = parse_registration(data, path)
        record = table.get(path.name)
        if record is None:
            raise RegistrationError(f"{study_dir / SEALED}: no line for {path.name}; expected each registration "
                                    f"sealed (`python -m rnnlm.study register --seal {relative}`, then commit)")
        if record != (registration.sha256, commit):
            raise RegistrationError(f"{study_dir / SEALED}: records {path.name} as {record[0][:12]} added by "
                                    f"{record[1][:12]}, but git holds {registration.sha256[:12]} added by {commit[:12]}; "
                                    "a registration is sealed once, by the commit that added it, and never edited")
        registration = dataclasses.replace(registration, sealed_by=commit, sealed_date=_when(repo, commit)["date"])
    return registration


def seal(repo: Path, path: Path) -> str:
    """Record in sealed.tsv beside `path` the commit that added it (`registering_commit`); returns it."""
    commit = registering_commit(repo, path)
    registration = load_registration(path)
    table = path.parent / SEALED
    if path.name in sealed(path.parent):
        raise RegistrationError(f"{table}: {path.name} is sealed already")
    head = "" if table.is_file() else "file\tsha256\tcommit\tdate\n"
    date = _git(repo, "show", "-s", "--format=%cI", commit).stdout.strip()
    text = (table.read_text(encoding="utf-8") if table.is_file() else "") + head
    write_text_atomic(table, text + f"{path.name}\t{registration.sha256}\t{commit}\t{date}\n")
    return commit


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def registering_commit(repo: Path, path: Path) -> str:
    """The commit that added the registration at `path` (relative to `repo` or absolute), checked:
    the file is committed, exactly one commit ever touched it, and the working copy is those bytes.
    RegistrationError otherwise: a registered file is never edited in place."""
    try:
        relative = Path(path).resolve().relative_to(Path(repo).resolve()).as_posix()
    except ValueError:
        raise RegistrationError(f"{path}: outside the repository {repo}; expected a registration file of the study "
                                "in this repository") from None
    done = _git(repo, "log", "--format=%H", "--follow", "--", relative)
    commits = done.stdout.split()
    if done.returncode != 0 or not commits:
        raise RegistrationError(f"{relative}: not committed; a registration counts from the commit that adds it")
    if len(commits) > 1:
        raise RegistrationError(f"{relative}: changed after the commit that registered it ({commits[-1][:7]}, then "
                                f"{', '.join(c[:7] for c in reversed(commits[:-1]))}); a rule change is a new "
                                "registration, never an edit")
    committed = subprocess.run(["git", "show", f"{commits[0]}:{relative}"], cwd=repo, capture_output=True).stdout
    if committed != (Path(repo) / relative).read_bytes():
        raise RegistrationError(f"{relative}: differs from the registered file of {commits[0][:7]}; a rule change is "
                                "a new registration, never an edit")
    return commits[0]


def descends_from(repo: Path, commit: str, ancestor: str) -> bool:
    """Whether `commit` is `ancestor` or one of its descendants (False for a commit git lacks)."""
    return _git(repo, "merge-base", "--is-ancestor", ancestor, commit).returncode == 0


def _when(repo: Path, commit: str) -> dict[str, str]:
    done = _git(repo, "show", "-s", "--format=%H %cI", commit)
    if done.returncode != 0:
        raise RegistrationError(f"commit {commit}: not in this repository; expected a commit that set a rule")
    full, date = done.stdout.split()
    return {"commit": full[:12], "date": date}


def _first_committed(repo: Path, folders: list[str]) -> dict[str, str] | None:
    """The first commit that added a file under any of `folders`."""
    done = _git(repo, "log", "--diff-filter=A", "--reverse", "--format=%H %cI", "--", *folders)
    lines = done.stdout.split("\n")
    if done.returncode != 0 or not lines[0]:
        return None
    full, date = lines[0].split()
    return {"commit": full[:12], "date": date}


def write_registration(draft: Path, out: Path, repo: Path = Path(".")) -> Registration:
    """Fill the draft's `history` from git and write it to `out` (which must not exist yet): per
    claim, the commit and date of each commit its `rule_commits` name, and the first commit that
    added a run folder of any model its `data_models` name. The draft's other text is kept."""
    if out.exists():
        raise RegistrationError(f"{out}: exists; a registration is never rewritten (write registration-<n+1>.yaml)")
    try:
        text = draft.read_text(encoding="utf-8")
        raw = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        why = error.strerror if isinstance(error, OSError) else str(error).splitlines()[0]
        raise RegistrationError(f"{draft}: cannot be read ({why}); expected a draft: the last registration, "
                                "edited") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("claims"), dict) or "history" in raw:
        raise RegistrationError(f"{draft}: expected a draft with a mapping of claims and no history (the last "
                                "registration, edited, its history removed: it is read from git)")
    for number, entry in raw["claims"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("rule_commits", []), list) or not isinstance(
                entry.get("data_models", []), list):
            raise RegistrationError(f"{draft}: claims.{number}: expected a mapping whose rule_commits and data_models "
                                    "are lists")
    lines = [text.rstrip("\n"), "", "# Read from git when this file was written (`python -m rnnlm.study register`).",
             "history:"]
    for number, entry in raw["claims"].items():
        for commit in entry.get("rule_commits", []):
            if not isinstance(commit, str):  # YAML reads 1234567, or 0123456 (octal), as a number
                raise RegistrationError(f"{draft}: claims.{number}.rule_commits: {commit!r} is read as a number; "
                                        "expected each commit as text, quoted where it is all digits ('1234567')")
    for number, entry in raw["claims"].items():
        rules = [_when(repo, c) for c in entry.get("rule_commits", [])]
        data = _first_committed(repo, [f"reports/study/{m}" for m in entry.get("data_models", [])])
        lines.append(f"  {number}:")  # commits quoted: a hash's first 12 digits can all be decimal ones
        lines.append("    rule_set: [" + ", ".join(f"{{commit: '{r['commit']}', date: '{r['date']}'}}" for r in rules) + "]")
        lines.append("    data_first_committed: " + ("null" if data is None else
                                                     f"{{commit: '{data['commit']}', date: '{data['date']}'}}"))
    written = "\n".join(lines) + "\n"
    parse_registration(written.encode(), out)  # refused whole, before anything is written
    write_text_atomic(out, written)
    return load_registration(out)


def _holds_commit(repo: Path, commit: object) -> bool:
    return isinstance(commit, str) and bool(commit) and _git(repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0


def trained_after(repo: Path, registration: Registration, seed: int, provenance: dict[str, Any], where: Path) -> bool:
    """Whether a run is confirmatory for `registration`, asked of git alone: its seed is one the
    registration names and the commit its provenance records (which git must hold) descends from the
    commit that added the registration. A `registration` record the provenance carries (collect writes
    one) must say what git says, of the file it names; else a RegistrationError naming `where`."""
    record, commit = provenance.get("registration"), provenance.get("commit")
    if seed not in registration.seeds and record is None:
        return False
    if not _holds_commit(repo, commit):
        raise RegistrationError(f"{where}: records the commit {commit!r}, which this repository does not hold; "
                                "expected the commit the run was trained on (a run of a registered seed is "
                                "confirmatory only when git shows that commit descends from the registration)")
    if record is not None:
        named = registration.path.parent / str(record.get("file"))
        added = registering_commit(repo, named) if NAME.match(named.name) and named.is_file() else None
        if added is None or record.get("commit") != added or \
                record.get("code_descends") is not descends_from(repo, commit, added):
            raise RegistrationError(
                f"{where}: says its code {'descends' if record.get('code_descends') else 'does not descend'} from "
                f"{record.get('file')} ({str(record.get('commit'))[:7]}), which git does not bear out"
                + (" (no such registration)" if added is None else
                   f" ({named.name} was added by {added[:7]})" if record.get("commit") != added else "")
                + "; expected the record `collect` writes from git (collect the run again)")
    return seed in registration.seeds and descends_from(repo, commit, registration.sealed_by)


def code_record(repo: Path, registration: Registration | None, seed: int, commit: str) -> dict[str, object]:
    """What a run's provenance says of the study's sealed registration, for a seed it names: the
    registration, its commit, and whether the code the run was trained on (`commit`) descends from
    it (read with git here, so that `report` needs none); nothing for another seed or no sealed one."""
    if registration is None or registration.sealed_by is None or seed not in registration.seeds:
        return {}
    return {"registration": {"file": registration.path.name, "commit": registration.sealed_by,
                             "code_descends": bool(commit) and descends_from(repo, commit, registration.sealed_by)}}
